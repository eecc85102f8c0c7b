package runner

import (
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
)

// maxPrefixKeys bounds the prefix-routing keys an Engine remembers.
const maxPrefixKeys = 1024

// RoutingSummary implements worker.PrefixSummarizer: the keys of up to max
// recently served prefixes (each request contributes one key per message
// prefix / prompt chunk; the deepest is the most recent) and the KV pool's
// room, and what the model is (describe.go).
func (e *Runner) RoutingSummary(max int) prefix.Summary {
	s := prefix.Summary{Keys: e.keys.Latest(max), Context: e.maxCtx,
		Format: e.info.format, Quantization: e.info.quant, Size: e.info.size}
	if e.pool != nil {
		st := e.pool.Stats()
		s.BlockSize, s.Blocks, s.FreeBlocks, s.BlockBytes = st.BlockSize, st.Blocks, st.Free+st.Cached, st.BlockBytes
	}
	return s
}

// recordKeys remembers the routing keys of a job about to be served.
func (e *Runner) recordKeys(j *job.Job) { e.keys.Add(prefix.Of(j)) }
