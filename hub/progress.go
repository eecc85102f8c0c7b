package hub

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress is one report about the file being downloaded.
type Progress struct {
	Repo, File  string
	Bytes       int64   // bytes on disk so far, including a resumed prefix
	Total       int64   // expected size; -1 if unknown
	BytesPerSec float64 // rate of this transfer (excludes the resumed prefix)
	Finished    bool    // the last report of this file's transfer
}

// progress counts the bytes written through it and reports them.
type progress struct {
	fn       func(Progress)
	every    time.Duration
	p        Progress
	start    time.Time
	resumed  int64
	lastSent time.Time
}

func (h *Hub) newProgress(repo, file string, off, total int64) *progress {
	pr := &progress{fn: h.cfg.Progress, every: h.cfg.ProgressInterval, start: time.Now(), resumed: off,
		p: Progress{Repo: repo, File: file, Bytes: off, Total: total}}
	pr.send(true)
	return pr
}

func (pr *progress) Write(b []byte) (int, error) {
	pr.p.Bytes += int64(len(b))
	pr.send(false)
	return len(b), nil
}

func (pr *progress) finish() {
	pr.p.Finished = true
	pr.send(true)
}

func (pr *progress) send(force bool) {
	if pr.fn == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(pr.lastSent) < pr.every {
		return
	}
	pr.lastSent = now
	if d := now.Sub(pr.start).Seconds(); d > 0 {
		pr.p.BytesPerSec = float64(pr.p.Bytes-pr.resumed) / d
	}
	pr.fn(pr.p)
}

// TextProgress returns a Progress function that prints a status line per
// file to w. interactive (a terminal) redraws one line with '\r'; otherwise
// (log files) it prints a line every logEvery and when a file is done.
func TextProgress(w io.Writer, interactive bool, logEvery time.Duration) func(Progress) {
	var mu sync.Mutex
	var last time.Time
	width := 0
	return func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Sprintf("download %s %s: %s", p.Repo, p.File, formatBytes(p.Bytes))
		if p.Total >= 0 {
			pct := 100.0
			if p.Total > 0 {
				pct = 100 * float64(p.Bytes) / float64(p.Total)
			}
			line += fmt.Sprintf(" / %s (%.0f%%)", formatBytes(p.Total), pct)
		}
		if p.BytesPerSec > 0 {
			line += fmt.Sprintf(" %s/s", formatBytes(int64(p.BytesPerSec)))
		}
		if p.Finished {
			line += " done"
		}
		if interactive {
			pad := ""
			if n := width - len(line); n > 0 {
				pad = strings.Repeat(" ", n)
			}
			width = len(line)
			end := ""
			if p.Finished {
				end, width = "\n", 0
			}
			fmt.Fprintf(w, "\r%s%s%s", line, pad, end)
			return
		}
		if p.Finished || time.Since(last) >= logEvery {
			last = time.Now()
			fmt.Fprintln(w, line)
		}
	}
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
