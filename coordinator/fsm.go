package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/pipeline"
)

// Durable cluster state replicated by Raft. Commands are typed, prefixed by a
// version byte and a type byte, followed by a JSON body. Apply is
// deterministic: it only reads the command and the current state.

const cmdVersion byte = 1

type cmdType byte

const (
	cmdRegisterModel cmdType = iota + 1
	cmdRemoveModel
	cmdSetPlacement
	cmdPutAPIKey
	cmdDeleteAPIKey
)

// ModelSpec is a registry entry. Its type lives in api/admin because the
// registry endpoints send it as is; its JSON is also the Raft state's.
type ModelSpec = admin.ModelSpec

// APIKey is a stored API key: only its SHA-256 hash is kept.
type APIKey struct {
	ID   string `json:"id"`
	Hash string `json:"hash"` // hex SHA-256 of the secret
	Name string `json:"name,omitempty"`
	// Admin keys may use the admin endpoints (keys.go).
	Admin    bool  `json:"admin,omitempty"`
	Created  int64 `json:"created,omitempty"`   // unix seconds, set by the proposer
	LastUsed int64 `json:"last_used,omitempty"` // unix seconds (cmdTouchAPIKey)
}

// State is the replicated state.
type State struct {
	Models    map[string]ModelSpec `json:"models"`
	Placement map[string][]string  `json:"placement"` // model -> worker names, sorted
	APIKeys   map[string]APIKey    `json:"api_keys"`  // by hash
	// Assign is the leader's placement of managed models: model -> workers
	// that should fetch and serve it, sorted (models.go). Placement above
	// is what workers actually serve (from gossip).
	Assign map[string][]string `json:"assign,omitempty"`
	// Pipelines are the plans of managed models split over several
	// workers, Seeds the worker holding each one's whole files, Epochs the
	// last epoch given to each model's plan (pipelines.go).
	Pipelines map[string]pipeline.Plan `json:"pipelines,omitempty"`
	Seeds     map[string]string        `json:"seeds,omitempty"`
	Epochs    map[string]uint64        `json:"epochs,omitempty"`
}

func newState() State {
	return State{Models: map[string]ModelSpec{}, Placement: map[string][]string{}, APIKeys: map[string]APIKey{}, Assign: map[string][]string{},
		Pipelines: map[string]pipeline.Plan{}, Seeds: map[string]string{}, Epochs: map[string]uint64{}}
}

func (s State) clone() State {
	c := State{Models: maps.Clone(s.Models), Placement: make(map[string][]string, len(s.Placement)), APIKeys: maps.Clone(s.APIKeys)}
	for k, v := range s.Placement {
		c.Placement[k] = slices.Clone(v)
	}
	c.Assign = make(map[string][]string, len(s.Assign))
	for k, v := range s.Assign {
		c.Assign[k] = slices.Clone(v)
	}
	clonePipelines(s, &c) // pipelines.go
	return c
}

type placementCmd struct {
	Model   string   `json:"model"`
	Workers []string `json:"workers"`
}

type nameCmd struct {
	Name string `json:"name"`
}

// encodeCmd builds the raft log payload for a command.
func encodeCmd(t cmdType, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode command %d: %w", t, err)
	}
	return append([]byte{cmdVersion, byte(t)}, b...), nil
}

// fsm applies commands to State. Reads take the read lock.
type fsm struct {
	mu    sync.RWMutex
	state State
	// applied is the index of the last log Apply has seen: raft's own
	// AppliedIndex runs ahead of the FSM (it is set when a batch is handed
	// to the FSM goroutine), too early for read-your-writes (readwrite.go).
	applied atomic.Uint64
}

func newFSM() *fsm { return &fsm{state: newState()} }

func (f *fsm) snapshot() State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.clone()
}

// Apply implements raft.FSM. It returns nil or an error value.
func (f *fsm) Apply(l *raft.Log) any {
	defer f.applied.Store(l.Index)
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.apply(l.Data)
}

func (f *fsm) apply(data []byte) error {
	if len(data) < 2 {
		return errors.New("short command")
	}
	if data[0] != cmdVersion {
		return fmt.Errorf("command version %d, want %d", data[0], cmdVersion)
	}
	body := data[2:]
	f.mu.Lock()
	defer f.mu.Unlock()
	switch cmdType(data[1]) {
	case cmdRegisterModel:
		var m ModelSpec
		if err := json.Unmarshal(body, &m); err != nil {
			return fmt.Errorf("register model: %w", err)
		}
		if m.Name == "" {
			return errors.New("register model: empty name")
		}
		m.Stages = nil // from the pipeline plan in answers, never stored
		f.state.Models[m.Name] = m
	case cmdRemoveModel:
		var c nameCmd
		if err := json.Unmarshal(body, &c); err != nil {
			return fmt.Errorf("remove model: %w", err)
		}
		delete(f.state.Models, c.Name)
		delete(f.state.Placement, c.Name)
		delete(f.state.Assign, c.Name)
		delete(f.state.Pipelines, c.Name)
		delete(f.state.Seeds, c.Name)
		delete(f.state.Epochs, c.Name)
	case cmdSetPlacement:
		var c placementCmd
		if err := json.Unmarshal(body, &c); err != nil {
			return fmt.Errorf("set placement: %w", err)
		}
		if len(c.Workers) == 0 {
			delete(f.state.Placement, c.Model)
		} else {
			w := slices.Clone(c.Workers)
			slices.Sort(w)
			f.state.Placement[c.Model] = w
		}
	case cmdPutAPIKey:
		var k APIKey
		if err := json.Unmarshal(body, &k); err != nil {
			return fmt.Errorf("put api key: %w", err)
		}
		if k.Hash == "" {
			return errors.New("put api key: empty hash")
		}
		// A key is identified by its id: a new secret for an id replaces
		// the old one, which must stop authenticating.
		for h, old := range f.state.APIKeys {
			if old.ID == k.ID {
				delete(f.state.APIKeys, h)
			}
		}
		f.state.APIKeys[k.Hash] = k
	case cmdDeleteAPIKey:
		var c nameCmd
		if err := json.Unmarshal(body, &c); err != nil {
			return fmt.Errorf("delete api key: %w", err)
		}
		for h, k := range f.state.APIKeys {
			if k.ID == c.Name || h == c.Name {
				delete(f.state.APIKeys, h)
			}
		}
	case cmdTouchAPIKey: // keys.go
		return f.applyTouchKey(body)
	case cmdSetAssignment: // models.go
		return f.applySetAssignment(body)
	case cmdSetPipeline: // pipelines.go
		return f.applySetPipeline(body)
	default:
		return fmt.Errorf("unknown command type %d", data[1])
	}
	return nil
}

// Snapshot implements raft.FSM: a cheap copy; Persist does the encoding.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) { return fsmSnapshot{f.snapshot()}, nil }

// Restore implements raft.FSM: replaces all state.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(&s); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if s.Models == nil {
		s.Models = map[string]ModelSpec{}
	}
	if s.Placement == nil {
		s.Placement = map[string][]string{}
	}
	if s.APIKeys == nil {
		s.APIKeys = map[string]APIKey{}
	}
	if s.Assign == nil {
		s.Assign = map[string][]string{}
	}
	if s.Pipelines == nil {
		s.Pipelines = map[string]pipeline.Plan{}
	}
	if s.Seeds == nil {
		s.Seeds = map[string]string{}
	}
	if s.Epochs == nil {
		s.Epochs = map[string]uint64{}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	return nil
}

type fsmSnapshot struct{ s State }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.s); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() {}
