// Package cluster provides macpool's membership layer (hashicorp/memberlist
// gossip carrying a small per-node metadata record) and the NATS subjects and
// message types that coordinators and workers exchange.
//
// Gossip carries only what a node needs to find the others: its role, a few
// hardware facts, the models it serves, its load, and the NATS / Raft
// addresses. Everything bigger (jobs, tokens) travels over NATS.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Roles a node can have.
const (
	RoleCoordinator = "coordinator"
	RoleWorker      = "worker"
)

// MetaMaxSize is memberlist's limit on node metadata.
const MetaMaxSize = 512

// Meta is the node metadata gossiped by memberlist. JSON keys are short
// because the encoded record must fit in MetaMaxSize bytes.
type Meta struct {
	Role    string `json:"r"`
	Version string `json:"v,omitempty"`
	// Started is when the node's membership started (unix seconds), for
	// its uptime; Membership fills it in.
	Started int64 `json:"st,omitempty"`
	// Hardware.
	Chip     string `json:"c,omitempty"`
	Cores    int    `json:"n,omitempty"`
	MemoryMB int64  `json:"m,omitempty"`
	// Apple GPU, read on a Mac (zero elsewhere): GPU cores and the GPU's
	// recommended working set in MB (Metal recommendedMaxWorkingSetSize:
	// how much of the unified memory a model + KV cache may use).
	GPUCores     int   `json:"gc,omitempty"`
	GPUWorkingMB int64 `json:"gw,omitempty"`
	// Worker load: models served, free job slots, total slots, jobs running.
	Models  []string `json:"md,omitempty"`
	Free    int      `json:"f,omitempty"`
	Slots   int      `json:"s,omitempty"`
	Running int      `json:"q,omitempty"`
	Ready   bool     `json:"rd,omitempty"` // worker: connected and pulling jobs
	// Store is a worker's modelstore peer HTTP address (host:port): other
	// workers pull its models from there (docs/cluster.md, "Model placement and distribution").
	Store string `json:"ms,omitempty"`
	// Pipeline is a worker's pipeline listener (host:port): the stages of
	// a pipelined model next to its stage connect there (docs/cluster.md,
	// "Pipelined models").
	Pipeline string `json:"pl,omitempty"`
	// MemLimit is a worker's --memory-limit in bytes (0: none): placement
	// gives it at most this much, all of it usable (not a fraction of
	// MemoryMB), and the worker loads nothing bigger.
	MemLimit int64 `json:"ml,omitempty"`
	// KVBytes is a worker's KV cache budget per model (--kv-bytes; 0:
	// derived from its memory): pipeline placement reserves it beside each
	// stage's weights here.
	KVBytes int64 `json:"kv,omitempty"`
	// Coordinator addresses.
	NATS string `json:"u,omitempty"` // NATS client URL(s), comma separated
	// Routes is the NATS cluster (route) URL of a coordinator whose embedded
	// server runs clustered JetStream; the other coordinators route to it.
	Routes string `json:"nr,omitempty"`
	Raft   string `json:"ra,omitempty"` // Raft transport address
	HTTP   string `json:"h,omitempty"`  // HTTP API address
	// Leaving is gossiped just before a graceful leave, so that the others
	// can tell a leave from a failure (memberlist does not say).
	Leaving bool `json:"l,omitempty"`
}

// ErrMetaTooLarge is returned by Encode when the record exceeds MetaMaxSize.
var ErrMetaTooLarge = errors.New("node metadata exceeds 512 bytes")

// Encode returns the wire form of m.
func (m Meta) Encode() ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w (%d bytes, %d models)", ErrMetaTooLarge, len(b), len(m.Models))
	}
	return b, nil
}

// ParseMeta is the one function that decodes gossiped node metadata.
func ParseMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, errors.New("parse meta: empty")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("parse meta: %w", err)
	}
	switch m.Role {
	case RoleCoordinator, RoleWorker:
	default:
		return m, fmt.Errorf("parse meta: unknown role %q", m.Role)
	}
	return m, nil
}

// Serves reports whether the node serves model.
func (m Meta) Serves(model string) bool {
	for _, x := range m.Models {
		if x == model {
			return true
		}
	}
	return false
}
