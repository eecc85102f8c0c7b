package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// embeddings answers POST /v1/embeddings: the job goes to the service like
// a completion; the worker's events carry the finished vectors (pooled,
// truncated to dimensions, normalised), which are put in input order here.
// There is no streaming form.
func (s *Server) embeddings(c *gin.Context) {
	body, e := s.readBody(c)
	if e != nil {
		writeError(c, e)
		return
	}
	req, e := openai.ParseEmbeddingRequest(body)
	if e != nil {
		writeError(c, e)
		return
	}
	ctx := c.Request.Context()
	j := &job.Job{ID: reqID(c), Kind: job.KindEmbedding, Model: req.Model, APIKey: keyID(c), Embedding: req}
	st, err := s.svc.Submit(ctx, j)
	if err != nil {
		writeError(c, asError(err))
		return
	}
	defer st.Close()

	n := req.Input.Len()
	vecs := make([][]float32, n)
	got := 0
	usage, worker, ok := collect(ctx, c, st, func(ev *job.Event) *openai.Error {
		for _, v := range ev.Embeddings {
			if v.Index < 0 || v.Index >= n {
				return openai.ServerError("worker sent embedding %d of a request with %d inputs", v.Index, n)
			}
			if v.Vector == nil {
				v.Vector = []float32{}
			}
			if vecs[v.Index] == nil {
				got++
			}
			vecs[v.Index] = v.Vector // a repeat (job rerun after a failover) replaces
		}
		return nil
	})
	if !ok {
		return
	}
	if got != n {
		writeError(c, openai.ServerError("worker sent %d embeddings for %d inputs", got, n))
		return
	}
	resp := &openai.EmbeddingResponse{Object: "list", Model: req.Model, Data: make([]openai.Embedding, n), MacpoolWorker: worker}
	b64 := req.EncodingFormat == "base64"
	for i, v := range vecs {
		resp.Data[i] = openai.Embedding{Object: "embedding", Index: i, Embedding: openai.Vector{Values: v, Base64: b64}}
	}
	if usage != nil {
		resp.Usage = openai.EmbeddingUsage{PromptTokens: usage.PromptTokens, TotalTokens: usage.PromptTokens}
	}
	writeJSON(c, http.StatusOK, resp)
}
