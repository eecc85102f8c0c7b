package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// scriptedEmbeddings answers 3 inputs out of order over two events.
func scriptedEmbeddings() []job.Event {
	return []job.Event{
		{Worker: "mac-1", Embeddings: []job.EmbeddingVector{{Index: 2, Vector: []float32{0.6, 0.8}}, {Index: 0, Vector: []float32{1, 0}}}},
		{Worker: "mac-1", Embeddings: []job.EmbeddingVector{{Index: 1, Vector: []float32{-0.28, 0.96}}}},
		{Worker: "mac-1", Usage: &openai.Usage{PromptTokens: 9, TotalTokens: 9}},
	}
}

func TestEmbeddingsClient(t *testing.T) {
	want := [][]float32{{1, 0}, {-0.28, 0.96}, {0.6, 0.8}}
	for _, format := range []oai.EmbeddingNewParamsEncodingFormat{oai.EmbeddingNewParamsEncodingFormatFloat, oai.EmbeddingNewParamsEncodingFormatBase64} {
		t.Run(string(format), func(t *testing.T) {
			svc := &fakeService{events: scriptedEmbeddings()}
			_, hs := newTestServer(t, svc, nil)
			client := newClient(hs.URL)
			resp, err := client.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
				Model:          "qwen3-embedding",
				Input:          oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "c"}},
				EncodingFormat: format,
				Dimensions:     oai.Int(2),
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Data) != 3 || resp.Usage.PromptTokens != 9 || resp.Usage.TotalTokens != 9 || resp.Model != "qwen3-embedding" {
				t.Fatalf("response %+v", resp)
			}
			for i, d := range resp.Data {
				if d.Index != int64(i) || len(d.Embedding) != 2 || float32(d.Embedding[0]) != want[i][0] || float32(d.Embedding[1]) != want[i][1] {
					t.Errorf("data[%d] = index %d %v, want %v", i, d.Index, d.Embedding, want[i])
				}
			}
			if raw := resp.Data[0].JSON.Embedding.Raw(); (format == "base64") != strings.HasPrefix(raw, `"`) {
				t.Errorf("encoding %s: embedding sent as %s", format, raw)
			}
			j := svc.lastJob(t)
			if j.Kind != job.KindEmbedding || j.Embedding == nil || j.Embedding.Input.Len() != 3 || *j.Embedding.Dimensions != 2 {
				t.Errorf("job %+v", j)
			}
			closedOnce(t, svc.lastStream(t))
		})
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	tooMany := `{"model":"m","input":[` + strings.Repeat(`"x",`, openai.MaxEmbeddingInputs) + `"x"]}`
	cases := []struct {
		name, body string
		events     []job.Event
		status     int
		param      string
	}{
		{"empty input", `{"model":"m","input":[]}`, nil, 400, "input"},
		{"empty string", `{"model":"m","input":""}`, nil, 400, "input"},
		{"empty token list", `{"model":"m","input":[[1,2],[]]}`, nil, 400, "input"},
		{"too many", tooMany, nil, 400, "input"},
		{"dimensions 0", `{"model":"m","input":"a","dimensions":0}`, nil, 400, "dimensions"},
		{"encoding", `{"model":"m","input":"a","encoding_format":"int8"}`, nil, 400, "encoding_format"},
		{"input type", `{"model":"m","input":{"x":1}}`, nil, 400, "input"},
		{"worker error", `{"model":"m","input":"a","dimensions":99999}`,
			[]job.Event{{Err: openai.InvalidRequest("dimensions", "dimensions must be at most 1024")}}, 400, "dimensions"},
		{"missing vector", `{"model":"m","input":["a","b"]}`,
			[]job.Event{{Embeddings: []job.EmbeddingVector{{Index: 0, Vector: []float32{1}}}}}, 500, ""},
		{"bad index", `{"model":"m","input":["a"]}`,
			[]job.Event{{Embeddings: []job.EmbeddingVector{{Index: 1, Vector: []float32{1}}}}}, 500, ""},
		{"unknown model", `{"model":"missing","input":"a"}`, nil, 404, "model"},
		{"repeat after failover", `{"model":"m","input":["a","b"]}`,
			[]job.Event{{Embeddings: []job.EmbeddingVector{{Index: 0, Vector: []float32{1}}}}, {Embeddings: []job.EmbeddingVector{{Index: 0, Vector: []float32{1}}, {Index: 1, Vector: []float32{1}}}}}, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &fakeService{events: tc.events}
			_, hs := newTestServer(t, svc, nil)
			resp, err := http.Post(hs.URL+"/v1/embeddings", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			var body struct {
				Error struct {
					Param *string `json:"param"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			got := ""
			if body.Error.Param != nil {
				got = *body.Error.Param
			}
			if got != tc.param {
				t.Errorf("param %q, want %q: %s", got, tc.param, b)
			}
		})
	}
}

// Events travel as JSON between worker and coordinator: vectors must come
// back bit-identical.
func TestEmbeddingEventJSON(t *testing.T) {
	ev := job.Event{Embeddings: []job.EmbeddingVector{{Index: 3, Vector: []float32{0.1, -1.2345678e-7, 3.4028235e38, 1.0 / 3}}}}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var back job.Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i, x := range ev.Embeddings[0].Vector {
		if back.Embeddings[0].Vector[i] != x {
			t.Errorf("value %d: got %v, want %v", i, back.Embeddings[0].Vector[i], x)
		}
	}
	if back.Embeddings[0].Index != 3 {
		t.Errorf("index %d, want 3", back.Embeddings[0].Index)
	}
}

func TestVectorJSON(t *testing.T) {
	for _, v := range []openai.Vector{{Values: []float32{1.5, -2, 0.1}}, {Values: []float32{1.5, -2, 0.1}, Base64: true}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var back openai.Vector
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Base64 != v.Base64 || len(back.Values) != 3 || back.Values[2] != float32(0.1) {
			t.Errorf("%s: got %+v, want %+v", b, back, v)
		}
	}
	var v openai.Vector
	if err := json.Unmarshal([]byte(`"AAA="`), &v); err == nil {
		t.Error("2-byte base64 vector accepted")
	}
}
