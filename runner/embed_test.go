package runner

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/testmodel"
)

// qwen3EmbeddingPostProcessor is the post_processor of Qwen3-Embedding's
// tokenizer.json: <|endoftext|> (151643) after every sequence.
const qwen3EmbeddingPostProcessor = `{"type":"TemplateProcessing",
 "single":[{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}}],
 "pair":[{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"<|endoftext|>","type_id":0}},{"Sequence":{"id":"B","type_id":1}},{"SpecialToken":{"id":"<|endoftext|>","type_id":1}}],
 "special_tokens":{"<|endoftext|>":{"id":"<|endoftext|>","ids":[151643],"tokens":["<|endoftext|>"]}}}`

const endOfText = 151643

// newEmbeddingAPI writes a tiny Qwen3 model with Qwen3-Embedding's
// tokenizer post-processor and serves it through the api handler with an
// in-process service. Small passes force inputs to span several of them.
func newEmbeddingAPI(t *testing.T) (oai.Client, *Runner) {
	t.Helper()
	root := testmodel.RepoRoot()
	tokDir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(root, "testdata", "tokenizers", "qwen3", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["post_processor"] = json.RawMessage(qwen3EmbeddingPostProcessor)
	raw, _ = json.Marshal(doc)
	if err := os.WriteFile(filepath.Join(tokDir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfgRaw, err := os.ReadFile(filepath.Join(root, "testdata", "tokenizers", "qwen3", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tokDir, "tokenizer_config.json"), cfgRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "emb")
	if err := testmodel.Write(dir, testmodel.Options{TokenizerDir: tokDir, HiddenSize: 32, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ModelDir, cfg.Threads, cfg.MaxContext = dir, 2, 64
	cfg.PrefillChunk, cfg.MaxBatchTokens = 8, 16
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	svc := &localService{e: e, name: "tiny"}
	srv, err := api.New(api.DefaultConfig(), svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		svc.wg.Wait()
	})
	return oai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0)), e
}

// directEmbedding is the reference: the model's final-normed hidden state
// of the last token of ids in one pass, truncated and L2-normalised.
func directEmbedding(t *testing.T, m *engine.Model, ids []int, dims int) []float64 {
	t.Helper()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	out, err := m.Embed(context.Background(), []engine.Seq{{Cache: c, Tokens: ids}})
	if err != nil {
		t.Fatal(err)
	}
	v := out[0][:dims]
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	r := make([]float64, dims)
	for i, x := range v {
		r[i] = float64(x) / math.Sqrt(ss)
	}
	return r
}

func relErr(got, want []float64) float64 {
	var d, n float64
	for i := range want {
		d += (got[i] - want[i]) * (got[i] - want[i])
		n += want[i] * want[i]
	}
	return math.Sqrt(d / n)
}

func TestAPIEmbeddings(t *testing.T) {
	client, e := newEmbeddingAPI(t)
	ctx := context.Background()
	texts := []string{"Hello world", "Instruct: Given a web search query, retrieve relevant passages\nQuery:What is the capital of China?",
		"The capital of China is Beijing.", strings.Repeat("macpool embeds ", 6)}
	tokenInputs := [][]int64{{9707, 1879}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, {151643}}

	textIDs := func(s string) []int { return append(e.Tokenizer().Encode(s), endOfText) }
	cases := []struct {
		name   string
		input  oai.EmbeddingNewParamsInputUnion
		ids    [][]int
		dims   int
		format oai.EmbeddingNewParamsEncodingFormat
	}{
		{name: "string", input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String(texts[0])}, ids: [][]int{textIDs(texts[0])}},
		{name: "strings", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}},
		{name: "strings dimensions base64", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}, dims: 12, format: "base64"},
		{name: "tokens", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: tokenInputs[1]}},
		{name: "token arrays base64", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: tokenInputs}, format: "base64"},
		{name: "token arrays dimensions", input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: tokenInputs}, dims: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ids := tc.ids
			switch {
			case tc.input.OfArrayOfStrings != nil:
				for _, s := range tc.input.OfArrayOfStrings {
					ids = append(ids, textIDs(s))
				}
			case tc.input.OfArrayOfTokens != nil:
				ids = [][]int{toInts(tc.input.OfArrayOfTokens)}
			case tc.input.OfArrayOfTokenArrays != nil:
				for _, a := range tc.input.OfArrayOfTokenArrays {
					ids = append(ids, toInts(a))
				}
			}
			params := oai.EmbeddingNewParams{Model: "tiny", Input: tc.input, EncodingFormat: tc.format}
			dims := 32
			if tc.dims > 0 {
				params.Dimensions, dims = oai.Int(int64(tc.dims)), tc.dims
			}
			resp, err := client.Embeddings.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Data) != len(ids) {
				t.Fatalf("%d embeddings, want %d", len(resp.Data), len(ids))
			}
			total := 0
			for i, d := range resp.Data {
				total += len(ids[i])
				if d.Index != int64(i) || len(d.Embedding) != dims {
					t.Fatalf("data[%d]: index %d, %d values, want %d", i, d.Index, len(d.Embedding), dims)
				}
				want := directEmbedding(t, e.Model(), ids[i], dims)
				if err := relErr(d.Embedding, want); err > 1e-5 {
					t.Errorf("input %d (%d tokens): rel L2 %.2e vs one-pass Embed, want < 1e-5", i, len(ids[i]), err)
				}
				var norm float64
				for _, x := range d.Embedding {
					norm += x * x
				}
				if math.Abs(norm-1) > 1e-5 {
					t.Errorf("input %d: squared norm %v, want 1", i, norm)
				}
			}
			if resp.Usage.PromptTokens != int64(total) || resp.Usage.TotalTokens != int64(total) {
				t.Errorf("usage %+v, want %d prompt tokens", resp.Usage, total)
			}
		})
	}
	// The texts really end with <|endoftext|>: without it the vector differs.
	resp, err := client.Embeddings.New(ctx, oai.EmbeddingNewParams{Model: "tiny", Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String(texts[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if err := relErr(resp.Data[0].Embedding, directEmbedding(t, e.Model(), e.Tokenizer().Encode(texts[0]), 32)); err < 1e-2 {
		t.Errorf("text embedding equals the one without <|endoftext|> (rel L2 %.2e)", err)
	}
}

func toInts(a []int64) []int {
	out := make([]int, len(a))
	for i, x := range a {
		out[i] = int(x)
	}
	return out
}

func TestAPIEmbeddingsErrors(t *testing.T) {
	client, _ := newEmbeddingAPI(t)
	long := make([]int64, 65)
	cases := []struct {
		name   string
		params oai.EmbeddingNewParams
		param  string
	}{
		{"dimensions above hidden size", oai.EmbeddingNewParams{Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("a")}, Dimensions: oai.Int(33)}, "dimensions"},
		{"dimensions zero", oai.EmbeddingNewParams{Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("a")}, Dimensions: oai.Int(0)}, "dimensions"},
		{"too long", oai.EmbeddingNewParams{Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: long}}, "input"},
		{"token outside vocab", oai.EmbeddingNewParams{Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1}, {1 << 30}}}}, "input"},
		{"empty", oai.EmbeddingNewParams{Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{}}}, "input"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.params.Model = "tiny"
			_, err := client.Embeddings.New(context.Background(), tc.params)
			var ae *oai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an API error", err)
			}
			if ae.StatusCode != 400 || ae.Param != tc.param {
				t.Errorf("status %d param %q, want 400 %q (%s)", ae.StatusCode, ae.Param, tc.param, ae.Message)
			}
		})
	}
}

func TestPostProcessorTokens(t *testing.T) {
	for _, tc := range []struct {
		name, json     string
		prefix, suffix []int
	}{
		{"qwen3-embedding", `{"post_processor":` + qwen3EmbeddingPostProcessor + `}`, nil, []int{endOfText}},
		{"bytelevel", `{"post_processor":{"type":"ByteLevel"}}`, nil, nil},
		{"none", `{"post_processor":null}`, nil, nil},
		{"sequence with bos", `{"post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing",
			"single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}},{"SpecialToken":{"id":"</s>"}}],
			"special_tokens":{"<s>":{"ids":[1]},"</s>":{"ids":[2]}}}]}}`, []int{1}, []int{2}},
	} {
		p, s, err := postProcessorTokens([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !equalInts(p, tc.prefix) || !equalInts(s, tc.suffix) {
			t.Errorf("%s: got %v / %v, want %v / %v", tc.name, p, s, tc.prefix, tc.suffix)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Embedding passes interleave with the scheduler's generation passes on
// the same model; both give what they give alone.
func TestAPIEmbeddingsWithGeneration(t *testing.T) {
	client, _ := newEmbeddingAPI(t)
	ctx := context.Background()
	in := oai.EmbeddingNewParams{Model: "tiny", Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one two three four five six seven eight nine ten", "short"}}}
	comp := oai.CompletionNewParams{Model: "tiny", Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("Once upon a time")}, MaxTokens: oai.Int(24), Temperature: oai.Float(0)}
	alone, err := client.Embeddings.New(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	aloneText, err := client.Completions.New(ctx, comp)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		emb  *oai.CreateEmbeddingResponse
		text *oai.Completion
		err  error
	}
	out := make(chan res, 4)
	for range 3 {
		go func() { r, err := client.Embeddings.New(ctx, in); out <- res{emb: r, err: err} }()
	}
	go func() { r, err := client.Completions.New(ctx, comp); out <- res{text: r, err: err} }()
	for range 4 {
		r := <-out
		switch {
		case r.err != nil:
			t.Fatal(r.err)
		case r.text != nil:
			if r.text.Choices[0].Text != aloneText.Choices[0].Text {
				t.Errorf("completion with embeddings running %q, alone %q", r.text.Choices[0].Text, aloneText.Choices[0].Text)
			}
		default:
			for i, d := range r.emb.Data {
				if e := relErr(d.Embedding, alone.Data[i].Embedding); e > 1e-5 {
					t.Errorf("input %d: rel L2 %.2e between concurrent and alone", i, e)
				}
			}
		}
	}
}
