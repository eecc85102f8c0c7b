package coordinator

import (
	"sync"

	"github.com/macpool/macpool/api/openai"
)

// keyStreams counts the open streams (queued or running requests) of each
// API key id, for Config.KeyMaxStreams. A request over the limit is
// refused with a 429 at once rather than queued: the client learns at
// once that it exceeds its share, and a queued request would hold a slot
// of the per-key queue bound (KeyQueueLimit) anyway. Anonymous callers
// (key id "") are not limited.
type keyStreams struct {
	mu   sync.Mutex
	open map[string]int
}

// acquire admits one more stream of key under limit (0: unlimited). The
// returned release must be called exactly once when the stream ends.
// It returns nil when key already has limit streams open.
func (k *keyStreams) acquire(key string, limit int) (release func()) {
	if key == "" || limit <= 0 {
		return func() {}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open == nil {
		k.open = map[string]int{}
	}
	if k.open[key] >= limit {
		return nil
	}
	k.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.open[key]--; k.open[key] <= 0 {
				delete(k.open, key)
			}
		})
	}
}

// OpenStreams is the number of open streams of key id (tests, status).
func (c *Coordinator) OpenStreams(key string) int {
	c.keyStreams.mu.Lock()
	defer c.keyStreams.mu.Unlock()
	return c.keyStreams.open[key]
}

// admitStream applies Config.KeyMaxStreams to a new request of key.
func (c *Coordinator) admitStream(key string) (func(), error) {
	release := c.keyStreams.acquire(key, c.cfg.KeyMaxStreams)
	if release == nil {
		return nil, openai.RateLimited(c.cfg.RetryAfter,
			"too many concurrent requests for API key %q (limit %d): wait for one to finish", key, c.cfg.KeyMaxStreams)
	}
	return release, nil
}
