package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// sseWriter writes "data: {json}\n\n" frames and flushes each write. On a
// resumable stream (job.Resumable) every frame also gets "id: TOKEN:N", N
// counting the stream's frames from 0; a resumed stream renders all its
// frames again and drops the first skip ones, which the client has.
type sseWriter struct {
	token string // job.Resumable.ResumeToken; "" = frames without ids
	n     int    // frames so far, written or skipped
	skip  int    // the first skip frames are not written (resumed stream)

	w       gin.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // per write; 0 = none (Config.StreamWriteTimeout)
	buf     bytes.Buffer
	enc     *json.Encoder
	err     error // first write error: the client is gone
}

func newSSEWriter(w gin.ResponseWriter, timeout time.Duration) *sseWriter {
	s := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	s.enc = json.NewEncoder(&s.buf)
	s.enc.SetEscapeHTML(false) // as OpenAI and vLLM send it
	return s
}

// start sends the SSE headers at once, so the client sees the 200 as soon as
// the job started. Headers set on w before (X-Macpool-Worker) go too.
func (s *sseWriter) start() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.w.Flush()
}

// next starts frame s.n: it reports whether the frame is written (not one
// a resumed client has) and writes its id line.
func (s *sseWriter) next() bool {
	n := s.n
	s.n++
	if n < s.skip {
		return false
	}
	if s.token != "" {
		s.buf.WriteString("id: ")
		s.buf.WriteString(job.EventID(s.token, n))
		s.buf.WriteByte('\n')
	}
	return true
}

// unnumbered makes the frames from now on go out without ids, uncounted:
// a mid-stream error's frames. An error is not part of the stream a resume
// replays (the coordinator's own shutdown, say, is not journaled): a client
// keeps the id of the last real frame (SSE keeps the last id over frames
// without one), and a resume gets the rest of the stream, or the error
// again where the journal has it.
func (s *sseWriter) unnumbered() {
	s.token, s.skip = "", 0
}

// add appends one frame to the pending buffer.
func (s *sseWriter) add(v any) {
	if s.next() {
		s.data(v)
	}
}

// data writes the data line of a frame.
func (s *sseWriter) data(v any) {
	s.buf.WriteString("data: ")
	if err := s.enc.Encode(v); err != nil {
		// Our own types always marshal; keep the stream well-formed anyway.
		s.buf.WriteString(`{"error":{"message":"internal error encoding chunk","type":"server_error","param":null,"code":null}}` + "\n")
	}
	s.buf.WriteByte('\n')
}

func (s *sseWriter) done() {
	if s.next() {
		s.buf.WriteString("data: [DONE]\n\n")
	}
}

// flush writes the pending frames to the client.
func (s *sseWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	if s.buf.Len() == 0 {
		return nil
	}
	if s.timeout > 0 {
		// Not every writer supports deadlines (tests' recorders): then
		// there is simply none.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	_, err := s.w.Write(s.buf.Bytes())
	s.buf.Reset()
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.err = err
		return err
	}
	return nil
}

// end clears the write deadline so a kept-alive connection's next request
// does not inherit it.
func (s *sseWriter) end() {
	if s.timeout > 0 && s.err == nil {
		_ = s.rc.SetWriteDeadline(time.Time{})
	}
}

// errorFrame is the mid-stream error: data: {"error":{...}}. Like vLLM we then
// send data: [DONE]; the OpenAI SDKs stop at the error frame and raise it.
func (s *sseWriter) errorFrame(e *openai.Error) {
	s.unnumbered()
	s.add(openai.ErrorResponse{Error: e})
	s.done()
}
