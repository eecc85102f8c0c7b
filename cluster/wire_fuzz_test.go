package cluster

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Fuzzers of the messages nodes decode from the network: gossip metadata,
// reply-stream frames, queued jobs, events, error frames and drain
// requests. Seed corpora: testdata/fuzz/<FuzzName>/. Nothing may panic,
// and what decodes must encode again.

func FuzzParseMeta(f *testing.F) {
	f.Add([]byte(`{"r":"worker","v":"dev","c":"Apple M2","n":8,"m":16384,"md":["qwen3-8b"],"f":2,"s":4,"q":2,"rd":true}`))
	f.Add([]byte(`{"r":"coordinator","u":"nats://10.0.0.1:4222","nr":"nats://10.0.0.1:6222","ra":"10.0.0.1:7000","h":"10.0.0.1:8080","l":true}`))
	f.Add([]byte(`{"r":"x"}`))
	f.Add([]byte(`{"r":"worker","md":null,"f":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta(b)
		if err != nil {
			return
		}
		if m.Role != RoleWorker && m.Role != RoleCoordinator {
			t.Fatalf("ParseMeta accepted role %q", m.Role)
		}
		if enc, err := m.Encode(); err == nil {
			if _, err := ParseMeta(enc); err != nil {
				t.Fatalf("re-encoded meta %q does not parse: %v", enc, err)
			}
		}
		_ = m.Serves("qwen3-8b")
	})
}

func FuzzParseFrame(f *testing.F) {
	f.Add(AppendFrame(nil, FrameEvent, 1, []byte(`{"Text":"hi","tk":[1]}`)))
	f.Add(AppendFrame(nil, FrameHandoff, 7, []byte("w1")))
	f.Add(AppendFrame(nil, FrameEnd, 1<<63, nil))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ParseFrame(b)
		if err != nil {
			if len(b) >= 9 {
				t.Fatalf("frame of %d bytes refused: %v", len(b), err)
			}
			return
		}
		if again := AppendFrame(nil, fr.Kind, fr.Seq, fr.Payload); !bytes.Equal(again, b) {
			t.Fatalf("round trip: got %x, want %x", again, b)
		}
	})
}

func FuzzDecodeError(f *testing.F) {
	f.Add([]byte(`{"status":429,"retry_after_ms":1500,"error":{"message":"slow down","type":"rate_limit_exceeded"}}`))
	f.Add([]byte(`{"status":503,"error":null}`))
	f.Add([]byte(`{"status":-1,"retry_after_ms":-9223372036854775808,"error":{}}`))
	f.Add([]byte(`nope`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e := DecodeError(b)
		if e == nil {
			t.Fatal("DecodeError returned nil")
		}
		_ = EncodeError(e)
		_ = e.Error()
	})
}

// FuzzJob decodes a queued job as a worker does (runJob) and an event as
// a coordinator does (stream.frame).
func FuzzJob(f *testing.F) {
	f.Add([]byte(`{"ID":"r1","Kind":"chat","Model":"m","APIKey":"k","Chat":{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4},"resume":[[1,2,3]]}`))
	f.Add([]byte(`{"Kind":"completion","Completion":{"model":"m","prompt":["a","b"],"n":2}}`))
	f.Add([]byte(`{"Kind":"chat","Chat":{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}],"tools":[{"type":"function","function":{"name":"f"}}],"stop":["x"],"logit_bias":{"1":5}}}`))
	f.Add([]byte(`{"Kind":"embedding","Embedding":{"model":"e","input":[[1,2],[3]]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var j Job
		if json.Unmarshal(b, &j) == nil {
			if _, err := json.Marshal(j); err != nil {
				t.Logf("decoded job does not encode: %v", err) // not a crash; NaN etc.
			}
		}
		var ev Event
		if json.Unmarshal(b, &ev) == nil {
			_, _ = json.Marshal(ev)
		}
		var dr DrainRequest
		_ = json.Unmarshal(b, &dr)
	})
}
