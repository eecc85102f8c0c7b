package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/worker"
)

// serveAgentAPI mounts the API as the CLI does, with the coordinator's
// cluster-wide response store.
func serveAgentAPI(t *testing.T, c *coordinator.Coordinator) *httptest.Server {
	t.Helper()
	acfg := api.DefaultConfig()
	acfg.Auth = c
	acfg.Responses = c.ResponseStore()
	acfg.ModelAliases = map[string]string{"claude-sonnet-4-5": testModel}
	srv, err := api.New(acfg, c, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// TestResponsesAcrossCoordinators: a response stored through one
// coordinator is continued, read, listed and deleted through another
// (JetStream key-value bucket), on the real job path with a test engine.
func TestResponsesAcrossCoordinators(t *testing.T) {
	c1, _ := startCoordinator(t, coordConfig(t, "coord-1", nil))
	c2, _ := startCoordinator(t, coordConfig(t, "coord-2", []string{c1.GossipAddr()}))
	startWorker(t, "worker-1", c1.GossipAddr(), 2, &worker.TestEngine{})
	waitWorkers(t, c1, 1)
	waitWorkers(t, c2, 1)
	hs1, hs2 := serveAgentAPI(t, c1), serveAgentAPI(t, c2)
	opts := []option.RequestOption{option.WithAPIKey("sk-none"), option.WithMaxRetries(0)}
	cl1 := oai.NewClient(append(opts, option.WithBaseURL(hs1.URL+"/v1/"))...)
	cl2 := oai.NewClient(append(opts, option.WithBaseURL(hs2.URL+"/v1/"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream := cl1.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("first turn words")},
	})
	var first responses.Response
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			first = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if text.String() != "first turn words" || first.OutputText() != text.String() {
		t.Fatalf("first: text %q, completed %q", text.String(), first.OutputText())
	}

	second, err := cl2.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, PreviousResponseID: oai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("second turn")},
	})
	if err != nil {
		t.Fatalf("second via coord-2: %v", err)
	}
	if second.OutputText() != "second turn" || second.PreviousResponseID != first.ID {
		t.Errorf("second = %s", second.RawJSON())
	}
	page, err := cl1.Responses.InputItems.List(ctx, second.ID, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc})
	if err != nil {
		t.Fatalf("input items via coord-1: %v", err)
	}
	var texts []string
	for _, raw := range page.Data {
		var it openai.ResponseItem
		if err := json.Unmarshal([]byte(raw.RawJSON()), &it); err != nil {
			t.Fatalf("item %s: %v", raw.RawJSON(), err)
		}
		for _, p := range it.Content {
			texts = append(texts, it.Role+":"+p.Text)
		}
	}
	if want := []string{"user:first turn words", "assistant:first turn words", "user:second turn"}; !slices.Equal(texts, want) {
		t.Errorf("input items = %v, want %v", texts, want)
	}
	if err := cl2.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatalf("delete via coord-2: %v", err)
	}
	_, err = cl1.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("get after delete: %v, want 404", err)
	}
	if got, err := cl1.Responses.Get(ctx, second.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != "second turn" {
		t.Errorf("get second via coord-1: %v %v", got, err)
	}

	// Messages on the same path, under an operator alias.
	req, _ := http.NewRequestWithContext(ctx, "POST", hs2.URL+"/v1/messages", strings.NewReader(
		`{"model":"claude-sonnet-4-5","max_tokens":20,"messages":[{"role":"user","content":"hello from claude"}]}`))
	req.Header.Set("x-api-key", "sk-none")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text":"hello from claude"`) || !strings.Contains(string(body), `"model":"claude-sonnet-4-5"`) {
		t.Errorf("messages: %d %s", resp.StatusCode, body)
	}
}
