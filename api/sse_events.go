package api

// event appends one named frame, "event: NAME\ndata: {json}\n\n": the
// Anthropic Messages and OpenAI Responses streams name every frame (their
// SDKs dispatch on the data's "type"; the event line is what they send, and
// some clients read it).
func (s *sseWriter) event(name string, v any) {
	if !s.next() {
		return
	}
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteByte('\n')
	s.data(v)
}
