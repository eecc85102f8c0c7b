package engine

import "fmt"

// NewBackend creates the registered backend opts.Backend ("" means "cpu")
// without loading a model: for callers that bind weights themselves
// (engine.New) and for composite registrations (the CLI's "auto", which
// tries "metal" and falls back to "cpu").
func NewBackend(opts Options) (Backend, error) {
	name := opts.Backend
	if name == "" {
		name = "cpu"
	}
	regMu.Lock()
	bf := backends[name]
	regMu.Unlock()
	if bf == nil {
		return nil, fmt.Errorf("backend %q not registered", name)
	}
	return bf(opts)
}
