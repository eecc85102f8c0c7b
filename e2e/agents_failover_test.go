package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// agentStream is what a client saw of one Responses or Messages stream.
type agentStream struct {
	worker string // X-Macpool-Worker: the worker that started it
	text   string // every text and reasoning delta, in order
	events []string
	final  string // the last event's data (response.completed / message_delta)
	err    error
}

// streamAgent posts body to path and reads the named-event stream,
// calling delta after every text delta.
func streamAgent(ctx context.Context, base, path, body string, delta func(worker string, n int)) *agentStream {
	o := &agentStream{}
	req, err := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		o.err = fmt.Errorf("status %d", resp.StatusCode)
		return o
	}
	o.worker = resp.Header.Get("X-Macpool-Worker")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string          `json:"type"`
			Delta json.RawMessage `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			o.err = fmt.Errorf("event %s: %v", data, err)
			return o
		}
		o.events = append(o.events, ev.Type)
		o.final = data
		var text string
		switch ev.Type {
		case "response.output_text.delta", "response.reasoning_text.delta":
			json.Unmarshal(ev.Delta, &text)
		case "content_block_delta":
			var d struct{ Text, Thinking string }
			json.Unmarshal(ev.Delta, &d)
			text = d.Text + d.Thinking
		case "error", "response.failed":
			o.err = fmt.Errorf("stream failed: %s", data)
		}
		if text != "" {
			o.text += text
			n++
			if delta != nil {
				delta(o.worker, n)
			}
		}
	}
	if o.err == nil {
		o.err = sc.Err()
	}
	return o
}

// TestAgentProtocolsFailover: a Responses stream and a Messages stream each
// survive a SIGKILL of the worker serving them mid-stream (the worker is
// restarted under its name at once) with the text of an uninterrupted run:
// both are chat jobs underneath, so the coordinator's resume applies.
func TestAgentProtocolsFailover(t *testing.T) {
	c := newRealCluster(t, 2, 1)
	base := "http://" + c.coord.fields["http"]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cases := []struct{ name, path, body, last string }{
		{"responses", "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"Tell me a long story about the sea.","temperature":0.9,"seed":7,"max_output_tokens":150,"stream":true,"store":false}`, realModel), "response.incomplete"},
		{"messages", "/v1/messages", fmt.Sprintf(`{"model":%q,"max_tokens":150,"temperature":0,"stream":true,"messages":[{"role":"user","content":"Tell me a long story about the sea."}]}`, realModel), "message_stop"},
	}
	for _, tc := range cases {
		want := streamAgent(ctx, base, tc.path, tc.body, nil)
		if want.err != nil || want.text == "" || want.events[len(want.events)-1] != tc.last {
			t.Fatalf("%s: uninterrupted run: %v, text %q, events %v", tc.name, want.err, want.text, want.events)
		}
		victim := make(chan string, 1)
		done := make(chan *agentStream, 1)
		go func() {
			done <- streamAgent(ctx, base, tc.path, tc.body, func(w string, n int) {
				if n == 3 {
					victim <- w
				}
			})
		}()
		var w string
		select {
		case w = <-victim:
		case got := <-done:
			t.Fatalf("%s: stream ended before 3 deltas: %+v", tc.name, got)
		}
		before := c.failovers()
		c.kill(w)
		c.startWorker(w, 1)
		got := <-done
		t.Logf("%s: killed %s mid-stream; %d events", tc.name, w, len(got.events))
		switch {
		case got.err != nil:
			t.Errorf("%s: %v", tc.name, got.err)
		case got.text != want.text:
			t.Errorf("%s: text after failover\n %q\nwant\n %q", tc.name, got.text, want.text)
		case got.events[len(got.events)-1] != tc.last:
			t.Errorf("%s: last event %s, want %s", tc.name, got.events[len(got.events)-1], tc.last)
		case c.failovers() == before:
			t.Errorf("%s: no failover logged", tc.name)
		}
		c.waitReady(2)
	}
}
