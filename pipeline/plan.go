package pipeline

import (
	"errors"
	"fmt"
)

// Plan is one placement of a pipelined model: its stages in layer order.
// The coordinator stores it as Raft state and every member worker gets the
// same Plan, so each can find its neighbours; Epoch changes with every
// re-placement, and members of different epochs never exchange frames.
type Plan struct {
	Model  string      `json:"model"`
	Epoch  uint64      `json:"epoch"`
	Stages []StageAddr `json:"stages"`
}

// StageAddr is one stage of a Plan: the worker that runs decoder layers
// [First, Last) and the address of its pipeline listener. The first stage
// also holds the embedding, the last the final norm and head.
type StageAddr struct {
	Worker string `json:"worker"`
	Addr   string `json:"addr"`
	First  int    `json:"first"`
	Last   int    `json:"last"`
}

// Validate checks that the stages are contiguous, non-empty and cover
// decoder layers [0, layers).
func (p Plan) Validate(layers int) error {
	if p.Model == "" {
		return errors.New("pipeline plan: model name is empty")
	}
	if len(p.Stages) == 0 {
		return fmt.Errorf("pipeline plan %s: no stages", p.Model)
	}
	next := 0
	seen := map[string]bool{}
	for i, s := range p.Stages {
		if s.Worker == "" {
			return fmt.Errorf("pipeline plan %s: stage %d has no worker", p.Model, i)
		}
		if seen[s.Worker] {
			return fmt.Errorf("pipeline plan %s: worker %s runs two stages", p.Model, s.Worker)
		}
		seen[s.Worker] = true
		if s.First != next || s.Last <= s.First {
			return fmt.Errorf("pipeline plan %s: stage %d covers layers [%d, %d), want [%d, >%d)", p.Model, i, s.First, s.Last, next, next)
		}
		next = s.Last
	}
	if next != layers {
		return fmt.Errorf("pipeline plan %s: stages end at layer %d, the model has %d", p.Model, next, layers)
	}
	return nil
}

// Index is the position of worker's stage in the plan, or -1.
func (p Plan) Index(worker string) int {
	for i, s := range p.Stages {
		if s.Worker == worker {
			return i
		}
	}
	return -1
}
