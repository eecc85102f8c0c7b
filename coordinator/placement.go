package coordinator

import (
	"cmp"
	"slices"
)

// Placement of managed models on workers (docs/cluster.md, "Model placement and distribution").
// The leader computes it from the registry and the workers' gossiped
// memory whenever membership changes, and stores it in State.Assign.

// PlacementConfig is the memory model of placement.
type PlacementConfig struct {
	// UsableFraction of a worker's memory may hold models (macOS lets the
	// GPU wire about 3/4 of unified memory).
	UsableFraction float64
	// KVBudget is reserved per placed model for KV cache and activations.
	KVBudget int64
	// Overhead is added to the file size for buffers the engine allocates
	// on load (fraction of the size).
	Overhead float64
}

// DefaultPlacementConfig: 75% of memory, 1 GiB KV per model, 10% overhead.
func DefaultPlacementConfig() PlacementConfig {
	return PlacementConfig{UsableFraction: 0.75, KVBudget: 1 << 30, Overhead: 0.1}
}

// Need is the memory a model of size bytes takes on a worker.
func (p PlacementConfig) Need(size int64) int64 {
	return size + int64(float64(size)*p.Overhead) + p.KVBudget
}

// needOn is Need on worker w: its own KV budget (--kv-bytes) when it
// gossips one, else KVBudget.
func (p PlacementConfig) needOn(size int64, w PlaceWorker) int64 {
	if w.KVBytes > 0 {
		p.KVBudget = w.KVBytes
	}
	return p.Need(size)
}

// PlaceWorker is a worker as placement sees it.
type PlaceWorker struct {
	Name     string
	MemoryMB int64 // 0: unknown (treated as room for anything)
	// GPUWorkingMB is the Apple GPU's recommended working set (Metal), the
	// real bound for a model on a Mac; 0 elsewhere: UsableFraction of MemoryMB.
	GPUWorkingMB int64
	// MemLimit is the worker's --memory-limit in bytes (0: none): all of
	// it is usable, it replaces the two above.
	MemLimit int64
	// KVBytes is the worker's --kv-bytes (0: unset): the KV cache each
	// model placed here holds, reserved instead of KVBudget.
	KVBytes int64
	// Serving are models the worker serves that placement does not manage
	// (started with --model): their memory is taken.
	Serving []string
}

// Place assigns managed models to workers. Current assignments are kept
// while their worker is alive and still has room (no needless moves);
// models then get more workers, those with the most free memory first
// (spreading replicas), up to Replicas (0: every worker with room). Big
// models are placed first. A model that fits nowhere gets no workers.
// The result maps every managed model to its sorted workers (maybe none).
func Place(cfg PlacementConfig, models []ModelSpec, workers []PlaceWorker, current map[string][]string) map[string][]string {
	out, _ := place(cfg, models, workers, current)
	return out
}

// place is Place that also returns each worker's room left.
func place(cfg PlacementConfig, models []ModelSpec, workers []PlaceWorker, current map[string][]string) (map[string][]string, map[string]int64) {
	free := map[string]int64{}
	sizes := map[string]int64{}
	for _, m := range models {
		sizes[m.Name] = m.Size
	}
	var names []string
	byName := map[string]PlaceWorker{}
	for _, w := range workers {
		free[w.Name] = cfg.room(w, models, sizes)
		names = append(names, w.Name)
		byName[w.Name] = w
	}
	var managed []ModelSpec
	for _, m := range models {
		if m.Managed {
			managed = append(managed, m)
		}
	}
	slices.SortFunc(managed, func(a, b ModelSpec) int {
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := map[string][]string{}
	want := func(m ModelSpec) int {
		if m.Replicas > 0 {
			return m.Replicas
		}
		return len(workers)
	}
	// Pass 1: keep what still fits.
	for _, m := range managed {
		out[m.Name] = []string{}
		for _, w := range current[m.Name] {
			room, alive := free[w]
			need := cfg.needOn(m.Size, byName[w])
			if !alive || room < need || len(out[m.Name]) >= want(m) {
				continue
			}
			free[w] -= need
			out[m.Name] = append(out[m.Name], w)
		}
	}
	// Pass 2: add workers with the most room.
	for _, m := range managed {
		for len(out[m.Name]) < want(m) {
			best := ""
			for _, w := range names {
				if slices.Contains(out[m.Name], w) || free[w] < cfg.needOn(m.Size, byName[w]) {
					continue
				}
				if best == "" || free[w] > free[best] || (free[w] == free[best] && w < best) {
					best = w
				}
			}
			if best == "" {
				break
			}
			free[best] -= cfg.needOn(m.Size, byName[best])
			out[m.Name] = append(out[m.Name], best)
		}
		slices.Sort(out[m.Name])
	}
	return out, free
}

// unknownRoom is the room of a worker that reports no memory: anything fits.
const unknownRoom = int64(1) << 62

// room is the memory worker w offers managed models: its memory limit, the
// GPU's working set, or UsableFraction of its memory, less what the
// unmanaged models it serves take.
func (cfg PlacementConfig) room(w PlaceWorker, models []ModelSpec, sizes map[string]int64) int64 {
	room := unknownRoom
	switch {
	case w.MemLimit > 0:
		room = w.MemLimit
	case w.GPUWorkingMB > 0:
		room = w.GPUWorkingMB << 20
	case w.MemoryMB > 0:
		room = int64(float64(w.MemoryMB<<20) * cfg.UsableFraction)
	}
	for _, s := range w.Serving {
		if sz, ok := sizes[s]; ok && !isManaged(models, s) {
			room -= cfg.needOn(sz, w)
		}
	}
	return room
}

func isManaged(models []ModelSpec, name string) bool {
	for _, m := range models {
		if m.Name == name {
			return m.Managed
		}
	}
	return false
}
