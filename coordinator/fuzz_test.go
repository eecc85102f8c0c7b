package coordinator

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/pipeline"
)

// Fuzzers of what a coordinator decodes from other nodes: Raft commands
// and snapshots (FSM) and workers' reply frames (stream.frame). Seed
// corpora: testdata/fuzz/<FuzzName>/. Nothing may panic; Apply must be
// deterministic.

func FuzzFSMApply(f *testing.F) {
	seed := func(t cmdType, body any) []byte { b, _ := encodeCmd(t, body); return b }
	f.Add(seed(cmdRegisterModel, ModelSpec{Name: "m", Source: "Qwen/Qwen3-8B"}), seed(cmdSetPlacement, placementCmd{Model: "m", Workers: []string{"b", "a"}}))
	f.Add(seed(cmdPutAPIKey, APIKey{ID: "k", Hash: "ab", Admin: true}), seed(cmdTouchAPIKey, touchCmd{ID: "k", At: 5}))
	f.Add(seed(cmdDeleteAPIKey, nameCmd{Name: "k"}), []byte{cmdVersion, 99, '{', '}'})
	f.Add([]byte{cmdVersion}, []byte{2, 1, '{'})
	f.Add(seed(cmdRegisterModel, ModelSpec{Name: "big", Managed: true, Layout: &admin.ModelLayout{Layers: []int64{1, 2}, KVPerToken: []int64{0, 0}, StatePerSeq: []int64{0, 0}}}),
		seed(cmdSetPipeline, pipelineCmd{Model: "big", Seed: "s", Plan: &pipeline.Plan{Model: "big", Stages: []pipeline.StageAddr{{Worker: "a", Addr: "a:1", First: 0, Last: 1}, {Worker: "b", Addr: "b:1", First: 1, Last: 2}}}}))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		f1, f2 := newFSM(), newFSM()
		for _, fsm := range []*fsm{f1, f2} {
			fsm.Apply(&raft.Log{Type: raft.LogCommand, Data: a})
			fsm.Apply(&raft.Log{Type: raft.LogCommand, Data: b})
		}
		s1, _ := json.Marshal(f1.snapshot())
		s2, _ := json.Marshal(f2.snapshot())
		if !bytes.Equal(s1, s2) {
			t.Fatalf("apply is not deterministic:\n%s\n%s", s1, s2)
		}
	})
}

func FuzzFSMRestore(f *testing.F) {
	f.Add([]byte(`{"models":{"m":{"name":"m"}},"placement":{"m":["a"]},"api_keys":{"h":{"id":"k","hash":"h"}}}`))
	f.Add([]byte(`{"models":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fsm := newFSM()
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
			return
		}
		st := fsm.snapshot()
		if st.Models == nil || st.Placement == nil || st.APIKeys == nil {
			t.Fatal("restored state has a nil map")
		}
		// A restored state takes commands.
		c, _ := encodeCmd(cmdPutAPIKey, APIKey{ID: "x", Hash: "y"})
		if r := fsm.Apply(&raft.Log{Type: raft.LogCommand, Data: c}); r != nil {
			t.Fatalf("apply after restore: %v", r)
		}
	})
}

// FuzzStreamFrame feeds in-sequence frames from a worker to a running
// stream (a failover to another worker needs a live cluster: covered by
// the failover and drain tests; here it always fails the stream).
func FuzzStreamFrame(f *testing.F) {
	f.Add(byte(cluster.FrameEvent), []byte(`{"Role":"assistant","Text":"hi","tk":[1]}`), []byte(`{"Text":" there","tk":[2],"FinishReason":"stop","Usage":{"prompt_tokens":1}}`), uint8(0))
	f.Add(byte(cluster.FrameEvent), []byte(`{"Choice":-3,"Text":"x"}`), []byte(`{"Choice":99999999,"Text":"y","tk":[-1]}`), uint8(1))
	f.Add(byte(cluster.FrameError), []byte(`{"status":503,"error":{"message":"x"}}`), []byte(`junk`), uint8(0))
	f.Add(byte(cluster.FrameStart), []byte(`w2`), []byte(`{"Embeddings":[{"Index":0,"Vector":[1]}]}`), uint8(2))
	f.Add(byte('?'), []byte{}, []byte{}, uint8(0))
	// A lone gossip node: a failover (handoff, 503 error frame) finds no
	// other worker and fails the stream without needing NATS.
	gc := cluster.FastConfig()
	gc.Name, gc.BindAddr = "fuzz", "127.0.0.1:0"
	gc.Meta = cluster.Meta{Role: cluster.RoleCoordinator}
	ml, err := cluster.New(gc)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ml.Kill() })
	f.Fuzz(func(t *testing.T, kind byte, p1, p2 []byte, attempts uint8) {
		c := &Coordinator{ml: ml, fsm: newFSM()}
		s := &stream{c: c, id: "j", model: "m", worker: "w1", next: 1, resumable: true, attempts: int(attempts % 4),
			job: &job.Job{Kind: job.KindChat}, notify: make(chan struct{}, 1)}
		c.streams.Store("j", s)
		s.frame(cluster.Frame{Kind: kind, Seq: 1, Payload: p1}, &nats.Msg{})
		s.frame(cluster.Frame{Kind: cluster.FrameEvent, Seq: 2, Payload: p2}, &nats.Msg{})
		s.mu.Lock()
		n, done := len(s.events), s.done
		s.mu.Unlock()
		if (kind == cluster.FrameError || kind == cluster.FrameHandoff) && !done {
			t.Fatal("an error or handoff frame without another worker did not end the stream")
		}
		if n > 2 {
			t.Fatalf("two frames gave %d events", n)
		}
	})
}
