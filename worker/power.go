package worker

import (
	"log/slog"
	"sync"
)

// power keeps the machine awake while jobs run: on macOS a worker holds an
// IOKit power assertion (PreventUserIdleSystemSleep) from the first running
// job until the last one ends (power_darwin.go); elsewhere nothing happens
// (power_other.go). A failure to take the assertion is logged once and
// never fails a job.
type power struct {
	mu      sync.Mutex
	n       int    // running jobs
	release func() // non-nil while the assertion is held
	warned  bool
}

// jobStarted and jobEnded bracket every running job.
func (p *power) jobStarted(log *slog.Logger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if p.n != 1 || p.release != nil {
		return
	}
	release, err := preventSleep("macpool worker is generating")
	if err != nil {
		if !p.warned {
			log.Warn("cannot keep the machine awake while jobs run", "err", err)
			p.warned = true
		}
		return
	}
	p.release = release
}

func (p *power) jobEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	if p.n == 0 && p.release != nil {
		p.release()
		p.release = nil
	}
}

// held reports whether the assertion is held (tests).
func (p *power) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.release != nil
}
