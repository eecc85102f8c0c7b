package client

// The live view of macpool top: it polls GET /v1/cluster/status and
// GET /metrics and redraws with plain ANSI escapes; rates (requests/s,
// tokens/s) and TTFT / queue wait percentiles are computed over the last
// interval from the counters and histograms.

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/metrics"
)

// clearScreen moves the cursor home and clears the screen.
const clearScreen = "\x1b[H\x1b[2J"

// Sample is the cluster at one moment.
type Sample struct {
	At      time.Time
	Status  admin.Status
	Metrics Metrics
}

// Sample fetches the status and the metrics.
func (c *Client) Sample(ctx context.Context) (Sample, error) {
	out := Sample{At: time.Now()}
	st, _, err := c.Status(ctx)
	if err != nil {
		return out, err
	}
	out.Status = st
	if out.Metrics, err = c.Metrics(ctx); err != nil {
		return out, err
	}
	return out, nil
}

// Top redraws the view on w every interval until ctx ends (then it returns
// nil). With once it prints one frame, measured over one interval, without
// escapes, and returns the first error; otherwise errors are shown and
// polling goes on, since a coordinator may restart.
func (c *Client) Top(ctx context.Context, w io.Writer, interval time.Duration, once bool) error {
	prev, err := c.Sample(ctx)
	if err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := c.Sample(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if once {
				return err
			}
			fmt.Fprintf(w, "%s%s: %v\n", clearScreen, c.base, err)
			continue
		}
		var b strings.Builder
		if !once {
			b.WriteString(clearScreen)
		}
		RenderTop(&b, prev, cur)
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
		if once {
			return nil
		}
		prev = cur
	}
}

// delta is cur − prev per bucket (counters reset by a coordinator restart
// give the current counts).
func delta(cur, prev map[float64]float64) map[float64]float64 {
	out := map[float64]float64{}
	reset := false
	for le, c := range cur {
		if c < prev[le] {
			reset = true
		}
		out[le] = c - prev[le]
	}
	if reset {
		return cur
	}
	return out
}

func rate(cur, prev float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	if cur < prev { // counter reset
		return cur / d.Seconds()
	}
	return (cur - prev) / d.Seconds()
}

func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

func fmtSeconds(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 0.01:
		return fmt.Sprintf("%.1fms", v*1000)
	case v < 1:
		return fmt.Sprintf("%.0fms", v*1000)
	default:
		return fmt.Sprintf("%.2fs", v)
	}
}

// RenderTop writes one frame: the cluster from cur, rates over prev → cur.
func RenderTop(w io.Writer, prev, cur Sample) {
	d := cur.At.Sub(prev.At)
	st := cur.Status
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "macpool top — coordinator %s, raft leader %s — %s, rates over %v\n\n",
		st.Coordinator, leader, cur.At.Format("15:04:05"), d.Round(time.Millisecond))

	nodes := append([]admin.NodeStatus(nil), st.Nodes...)
	sortNodes(nodes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tCHIP\tMEMORY\tMODELS\tSLOTS BUSY/FREE\tKV FREE\tTOKENS/S")
	for _, n := range nodes {
		role := n.Role
		if n.Raft != "" {
			role += " (" + n.Raft + ")"
		}
		chip := n.Chip
		if chip == "" {
			chip = "-"
		}
		models := strings.Join(n.Models, ",")
		if models == "" {
			models = "-"
		}
		slots, kv, tps := "-", "-", "-"
		if n.Role == cluster.RoleWorker {
			slots = fmt.Sprintf("%d/%d", n.Running, n.Free)
			switch {
			case n.Leaving:
				slots += " (leaving)"
			case !n.Ready:
				slots += " (not ready)"
			}
			if n.KVBlocks > 0 {
				kv = fmt.Sprintf("%d%% of %d blocks", 100*n.KVFreeBlocks/n.KVBlocks, n.KVBlocks)
			}
			sel := map[string]string{"worker": n.Name}
			tps = fmtRate(rate(cur.Metrics.Sum("macpool_generated_tokens_total", sel), prev.Metrics.Sum("macpool_generated_tokens_total", sel), d))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f GB\t%s\t%s\t%s\t%s\n", n.Name, role, chip, float64(n.MemoryMB)/1024, models, slots, kv, tps)
	}
	tw.Flush()

	// Models: those with a queue, served by a worker, or seen in metrics.
	set := map[string]bool{}
	for m := range st.Queued {
		set[m] = true
	}
	for _, n := range st.Nodes {
		for _, m := range n.Models {
			set[m] = true
		}
	}
	for _, x := range cur.Metrics["macpool_requests_total"].GetMetric() {
		if m := label(x, "model"); m != "" && m != metrics.UnknownModel {
			set[m] = true
		}
	}
	models := make([]string, 0, len(set))
	for m := range set {
		models = append(models, m)
	}
	sort.Strings(models)
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tQUEUED\tREQUESTS/S\tTTFT P50\tQUEUE WAIT P50\tTOKENS/S")
	for _, m := range models {
		sel := map[string]string{"model": m}
		reqs := rate(cur.Metrics.Sum("macpool_requests_total", sel), prev.Metrics.Sum("macpool_requests_total", sel), d)
		toks := rate(cur.Metrics.Sum("macpool_generated_tokens_total", sel), prev.Metrics.Sum("macpool_generated_tokens_total", sel), d)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", m, st.Queued[m], fmtRate(reqs),
			fmtSeconds(recentQuantile(cur.Metrics, prev.Metrics, "macpool_time_to_first_token_seconds", sel)),
			fmtSeconds(recentQuantile(cur.Metrics, prev.Metrics, "macpool_queue_wait_seconds", sel)),
			fmtRate(toks))
	}
	tw.Flush()

	if _, ok := cur.Metrics[metrics.PrefixRoutes]; ok {
		n := func(outcome string) int {
			sel := map[string]string{"outcome": outcome}
			c, p := cur.Metrics.Sum(metrics.PrefixRoutes, sel), prev.Metrics.Sum(metrics.PrefixRoutes, sel)
			if c < p {
				p = 0
			}
			return int(c - p)
		}
		fmt.Fprintf(w, "\nprefix routing, last interval: %d offered to the prefix holder, %d taken, %d busy, %d queued after a lost start\n",
			n("offered"), n("taken"), n("busy"), n("fallback"))
	}
}

// recentQuantile is the median of the observations of the last interval,
// or of all observations when the interval had none.
func recentQuantile(cur, prev Metrics, name string, sel map[string]string) float64 {
	c := cur.Buckets(name, sel)
	if v := Quantile(0.5, delta(c, prev.Buckets(name, sel))); !math.IsNaN(v) {
		return v
	}
	return Quantile(0.5, c)
}
