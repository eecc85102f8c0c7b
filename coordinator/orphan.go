package coordinator

import (
	"time"
)

// orphanWait is how long a queued job (new, or requeued by a failover) waits
// while no live worker serves its model before it fails with a 503: a
// request that cannot finish anywhere ends with a clear error instead of
// waiting in the queue for ever. A worker that restarts within it (or a new
// one) takes the job.
const orphanWait = 5 * time.Second

// orphan is called by watchMembers for a queued job: served says whether a
// live worker serves its model now.
func (s *stream) orphan(served bool) {
	s.mu.Lock()
	if served || s.done || s.worker != "" {
		s.orphaned = time.Time{}
		s.mu.Unlock()
		return
	}
	if s.orphaned.IsZero() {
		s.orphaned = time.Now()
	}
	waited := time.Since(s.orphaned)
	s.mu.Unlock()
	if waited > orphanWait {
		s.fail(unavailable("no worker is serving model %q any more (waited %v in the queue)", s.model, orphanWait))
	}
}
