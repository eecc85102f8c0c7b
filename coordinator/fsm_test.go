package coordinator

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func mustCmd(t *testing.T, typ cmdType, body any) []byte {
	t.Helper()
	b, err := encodeCmd(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFSMApply(t *testing.T) {
	f := newFSM()
	cmds := [][]byte{
		mustCmd(t, cmdRegisterModel, ModelSpec{Name: "qwen3-8b", Source: "Qwen/Qwen3-8B", Format: "safetensors"}),
		mustCmd(t, cmdRegisterModel, ModelSpec{Name: "gone", Source: "/x"}),
		mustCmd(t, cmdSetPlacement, placementCmd{Model: "qwen3-8b", Workers: []string{"w2", "w1"}}),
		mustCmd(t, cmdPutAPIKey, APIKey{ID: "k1", Hash: HashKey("secret")}),
		mustCmd(t, cmdPutAPIKey, APIKey{ID: "k2", Hash: HashKey("other")}),
		mustCmd(t, cmdRemoveModel, nameCmd{Name: "gone"}),
		mustCmd(t, cmdDeleteAPIKey, nameCmd{Name: "k2"}),
	}
	for i, c := range cmds {
		if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: c}); r != nil {
			t.Fatalf("command %d: %v", i, r)
		}
	}
	st := f.snapshot()
	if len(st.Models) != 1 || st.Models["qwen3-8b"].Source != "Qwen/Qwen3-8B" {
		t.Errorf("models: got %+v", st.Models)
	}
	if got := strings.Join(st.Placement["qwen3-8b"], ","); got != "w1,w2" {
		t.Errorf("placement: got %q, want w1,w2 (sorted)", got)
	}
	if len(st.APIKeys) != 1 || st.APIKeys[HashKey("secret")].ID != "k1" {
		t.Errorf("keys: got %+v", st.APIKeys)
	}

	// Deterministic: the same log gives the same state.
	g := newFSM()
	for _, c := range cmds {
		g.Apply(&raft.Log{Type: raft.LogCommand, Data: c})
	}
	a, _ := json.Marshal(f.snapshot())
	b, _ := json.Marshal(g.snapshot())
	if !bytes.Equal(a, b) {
		t.Fatalf("replay differs:\n%s\n%s", a, b)
	}
}

func TestFSMRejects(t *testing.T) {
	f := newFSM()
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"short", []byte{1}, "short command"},
		{"version", []byte{9, byte(cmdRegisterModel), '{', '}'}, "command version 9"},
		{"type", []byte{cmdVersion, 99, '{', '}'}, "unknown command type 99"},
		{"body", []byte{cmdVersion, byte(cmdRegisterModel), '{'}, "register model"},
		{"empty name", mustCmd(t, cmdRegisterModel, ModelSpec{}), "empty name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: tc.data})
			err, _ := r.(error)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", r, tc.want)
			}
		})
	}
}

type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	f := newFSM()
	f.Apply(&raft.Log{Type: raft.LogCommand, Data: mustCmd(t, cmdRegisterModel, ModelSpec{Name: "m"})})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Later writes do not leak into the snapshot.
	f.Apply(&raft.Log{Type: raft.LogCommand, Data: mustCmd(t, cmdRegisterModel, ModelSpec{Name: "later"})})
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	g.Apply(&raft.Log{Type: raft.LogCommand, Data: mustCmd(t, cmdRegisterModel, ModelSpec{Name: "stale"})})
	if err := g.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	st := g.snapshot()
	if _, ok := st.Models["m"]; !ok || len(st.Models) != 1 {
		t.Fatalf("restored models: got %+v, want only m", st.Models)
	}
}

func TestBoltStore(t *testing.T) {
	s, err := openBoltStore(t.TempDir() + "/raft.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logs := []*raft.Log{{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}, {Index: 3, Term: 2, Data: []byte("c")}}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 1 || last != 3 {
		t.Fatalf("index range: got [%d,%d], want [1,3]", first, last)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil || string(l.Data) != "b" {
		t.Fatalf("GetLog(2): %+v %v", l, err)
	}
	if err := s.DeleteRange(1, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(1, &l); err != raft.ErrLogNotFound {
		t.Fatalf("deleted log: got %v, want ErrLogNotFound", err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: got %v, want \"not found\" (raft checks the text)", err)
	}
	s.SetUint64([]byte("CurrentTerm"), 7)
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Fatalf("GetUint64: %d %v", v, err)
	}
}

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.Name, base.DataDir = "c", "/tmp/x"
	if err := base.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Name = "" }, "name must be set"},
		{func(c *Config) { c.RaftLeaderLeaseTimeout = 2 * c.RaftHeartbeatTimeout }, "leader lease"},
		{func(c *Config) { c.KeyQueueLimit = c.QueueLimit + 1 }, "per-key queue limit"},
		{func(c *Config) { c.NATS = "localhost:4222" }, "must be \"embedded\" or nats:// URLs"},
	} {
		c := base
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want error containing %q", err, tc.want)
		}
	}
}
