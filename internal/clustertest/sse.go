package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// SSEFrame is one server-sent event as it came: its id, event and data
// lines (data joined by "\n").
type SSEFrame struct {
	ID, Event, Data string
}

// StreamRequest is one streamed request to an OpenAI or Anthropic
// endpoint, read frame by frame.
type StreamRequest struct {
	URL         string // full URL of the endpoint
	Body        string
	Key         string // Bearer key ("": none)
	LastEventID string // sent as Last-Event-ID when set
	// Stop, if set, ends the read (and the connection, as a client that
	// goes away) after this many frames.
	Stop int
	// OnFrame, if set, is called with the count of frames read after each.
	OnFrame func(n int)
}

// StreamResponse is what a StreamRequest got.
type StreamResponse struct {
	Status int
	Header http.Header
	Body   string // the body of a non-200 answer
	Frames []SSEFrame
}

// Stream sends r and reads its SSE frames until the stream ends or r.Stop
// frames came; then the connection is closed.
func Stream(ctx context.Context, r StreamRequest) (*StreamResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // closes the connection
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, strings.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Key != "" {
		req.Header.Set("Authorization", "Bearer "+r.Key)
	}
	if r.LastEventID != "" {
		req.Header.Set("Last-Event-ID", r.LastEventID)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &StreamResponse{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		out.Body = string(b)
		return out, nil
	}
	err = ReadSSE(resp.Body, func(f SSEFrame) bool {
		out.Frames = append(out.Frames, f)
		if r.OnFrame != nil {
			r.OnFrame(len(out.Frames))
		}
		return r.Stop == 0 || len(out.Frames) < r.Stop
	})
	return out, err
}

// ReadSSE reads frames from rd, calling each until it returns false or
// the stream ends.
func ReadSSE(rd io.Reader, each func(SSEFrame) bool) error {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var f SSEFrame
	var data []string
	have := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if have {
				f.Data = strings.Join(data, "\n")
				if !each(f) {
					return nil
				}
			}
			f, data, have = SSEFrame{}, nil, false
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			f.ID, have = value, true
		case "event":
			f.Event, have = value, true
		case "data":
			data, have = append(data, value), true
		}
	}
	return sc.Err()
}

// FrameText is the generated text a frame carries, for any of the four
// streaming protocols (chat and legacy completions, Responses, Anthropic
// Messages).
func FrameText(f SSEFrame) string {
	var v struct {
		Type    string `json:"type"`
		Delta   json.RawMessage
		Choices []struct {
			Text  string `json:"text"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(f.Data), &v) != nil {
		return ""
	}
	var b strings.Builder
	for _, c := range v.Choices {
		b.WriteString(c.Text)
		b.WriteString(c.Delta.Content)
	}
	switch v.Type {
	case "response.output_text.delta":
		var s string
		json.Unmarshal(v.Delta, &s)
		b.WriteString(s)
	case "content_block_delta":
		var d struct {
			Text string `json:"text"`
		}
		json.Unmarshal(v.Delta, &d)
		b.WriteString(d.Text)
	}
	return b.String()
}

// FramesText joins the text of frames.
func FramesText(frames []SSEFrame) string {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString(FrameText(f))
	}
	return b.String()
}

// CheckIDs checks that every frame carries "TOKEN:N" with one token and N
// counting up from first, and returns the token.
func CheckIDs(frames []SSEFrame, first int) (string, error) {
	token := ""
	for i, f := range frames {
		tok, n, ok := cutID(f.ID)
		if !ok {
			return "", fmt.Errorf("frame %d (%q) has id %q, want TOKEN:N", i, f.Data, f.ID)
		}
		if token == "" {
			token = tok
		}
		if tok != token || n != first+i {
			return "", fmt.Errorf("frame %d has id %q, want %s:%d", i, f.ID, token, first+i)
		}
	}
	return token, nil
}

func cutID(id string) (string, int, bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	var n int
	if _, err := fmt.Sscanf(id[i+1:], "%d", &n); err != nil {
		return "", 0, false
	}
	return id[:i], n, true
}

// Ended reports whether frames end as a complete stream of their protocol
// ([DONE], message_stop, response.completed).
func Ended(frames []SSEFrame) bool {
	if len(frames) == 0 {
		return false
	}
	last := frames[len(frames)-1]
	return last.Data == "[DONE]" || last.Event == "message_stop" || last.Event == "response.completed" ||
		bytes.Contains([]byte(last.Data), []byte(`"type":"response.completed"`))
}
