package main

// macpool top: a live terminal view of the cluster (owner: routing). It
// polls a coordinator's GET /v1/cluster/status and GET /metrics and redraws
// with plain ANSI escapes; rates (requests/s, tokens/s) and TTFT / queue
// wait percentiles are computed over the last interval from the counters
// and histograms.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/metrics"
)

func init() {
	register("top", "live terminal view of nodes, load, queues, requests/s, tokens/s and TTFT", runTop)
}

func runTop(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("top", stderr)
	addr := fs.String("coordinator", "http://127.0.0.1:8080", "HTTP address (URL or host:port) of any coordinator")
	interval := fs.Duration("interval", time.Second, "refresh interval; rates are computed over it")
	once := fs.Bool("once", false, "print one frame (measured over one interval) and exit")
	key := fs.String("api-key", "", "API key, needed once the cluster stores keys (default $MACPOOL_API_KEY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return fmt.Errorf("%w: -interval %v must be at least 10ms", errUsage, *interval)
	}
	base := *addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	base = strings.TrimRight(base, "/")
	if *key == "" {
		*key = os.Getenv("MACPOOL_API_KEY")
	}
	src := topSource{base: base, key: *key, client: &http.Client{Timeout: 5 * time.Second}}

	prev, err := src.sample(ctx)
	if err != nil {
		return err
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := src.sample(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if *once {
				return err
			}
			fmt.Fprintf(stdout, "\x1b[H\x1b[2J%s: %v\n", base, err) // keep trying: a coordinator may restart
			continue
		}
		var b strings.Builder
		if !*once {
			b.WriteString("\x1b[H\x1b[2J") // cursor home, clear screen
		}
		renderTop(&b, prev, cur)
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return err
		}
		if *once {
			return nil
		}
		prev = cur
	}
}

// topSource fetches samples from one coordinator.
type topSource struct {
	base, key string
	client    *http.Client
}

// topSample is the cluster at one moment.
type topSample struct {
	at      time.Time
	status  coordinator.Status
	metrics promSamples
}

func (s topSource) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: -coordinator %q: %v", errUsage, s.base, err)
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", s.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s%s: %w", s.base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s: %s", s.base, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

func (s topSource) sample(ctx context.Context) (topSample, error) {
	out := topSample{at: time.Now()}
	body, err := s.get(ctx, coordinator.StatusPath)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(body, &out.status); err != nil {
		return out, fmt.Errorf("decode status: %w", err)
	}
	body, err = s.get(ctx, metrics.Path)
	if err != nil {
		return out, err
	}
	out.metrics = parseProm(string(body))
	return out, nil
}

// promSamples maps a metric name to its samples.
type promSamples map[string][]promSample

type promSample struct {
	labels map[string]string
	value  float64
}

// parseProm reads the Prometheus text format (comments skipped, label
// values unescaped); malformed lines are ignored.
func parseProm(text string) promSamples {
	out := promSamples{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, rest, ok := splitPromLine(line)
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[name] = append(out[name], promSample{labels: labels, value: v})
	}
	return out
}

// splitPromLine splits `name{a="x",b="y"} rest` into its parts.
func splitPromLine(line string) (name string, labels map[string]string, rest string, ok bool) {
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, "", false
	}
	name, labels = line[:i], map[string]string{}
	if line[i] == ' ' {
		return name, labels, line[i+1:], true
	}
	j := i + 1
	for {
		for j < len(line) && (line[j] == ' ' || line[j] == ',') {
			j++
		}
		if j < len(line) && line[j] == '}' {
			return name, labels, line[j+1:], true
		}
		eq := strings.IndexByte(line[j:], '=')
		if eq < 0 || j+eq+1 >= len(line) || line[j+eq+1] != '"' {
			return "", nil, "", false
		}
		key := strings.TrimSpace(line[j : j+eq])
		k := j + eq + 2
		var v strings.Builder
		for ; k < len(line) && line[k] != '"'; k++ {
			if line[k] == '\\' && k+1 < len(line) {
				k++
				switch line[k] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(line[k])
				}
				continue
			}
			v.WriteByte(line[k])
		}
		if k >= len(line) {
			return "", nil, "", false
		}
		labels[key] = v.String()
		j = k + 1
	}
}

// sum adds the samples of name whose labels include match.
func (p promSamples) sum(name string, match map[string]string) float64 {
	var s float64
	for _, x := range p[name] {
		if labelsMatch(x.labels, match) {
			s += x.value
		}
	}
	return s
}

func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// buckets returns the cumulative histogram buckets (le → count) of name
// for the samples matching match, summed over other labels.
func (p promSamples) buckets(name string, match map[string]string) map[float64]float64 {
	out := map[float64]float64{}
	for _, x := range p[name+"_bucket"] {
		if !labelsMatch(x.labels, match) {
			continue
		}
		le, err := strconv.ParseFloat(x.labels["le"], 64)
		if err != nil {
			continue
		}
		out[le] += x.value
	}
	return out
}

// quantile estimates quantile q from cumulative buckets (le → count) the
// way PromQL's histogram_quantile does: linear within the bucket, the upper
// bound of the last finite bucket if it falls into +Inf. NaN without
// observations.
func quantile(q float64, b map[float64]float64) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return math.NaN()
	}
	total := b[les[len(les)-1]]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, le := range les {
		c := b[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			if c == below {
				return le
			}
			return lower + (le-lower)*(rank-below)/(c-below)
		}
		lower, below = le, c
	}
	return lower
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

// renderTop writes one frame: the cluster from cur, rates over prev → cur.
func renderTop(w io.Writer, prev, cur topSample) {
	d := cur.at.Sub(prev.at)
	st := cur.status
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "macpool top — coordinator %s, raft leader %s — %s, rates over %v\n\n",
		st.Coordinator, leader, cur.at.Format("15:04:05"), d.Round(time.Millisecond))

	nodes := append([]coordinator.NodeStatus(nil), st.Nodes...)
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].Role != nodes[j].Role {
			return nodes[i].Role < nodes[j].Role
		}
		return nodes[i].Name < nodes[j].Name
	})
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
			tps = fmtRate(rate(cur.metrics.sum("macpool_generated_tokens_total", sel), prev.metrics.sum("macpool_generated_tokens_total", sel), d))
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
	for _, x := range cur.metrics["macpool_requests_total"] {
		if m := x.labels["model"]; m != "" && m != metrics.UnknownModel {
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
		reqs := rate(cur.metrics.sum("macpool_requests_total", sel), prev.metrics.sum("macpool_requests_total", sel), d)
		toks := rate(cur.metrics.sum("macpool_generated_tokens_total", sel), prev.metrics.sum("macpool_generated_tokens_total", sel), d)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", m, st.Queued[m], fmtRate(reqs),
			fmtSeconds(recentQuantile(cur.metrics, prev.metrics, "macpool_time_to_first_token_seconds", sel)),
			fmtSeconds(recentQuantile(cur.metrics, prev.metrics, "macpool_queue_wait_seconds", sel)),
			fmtRate(toks))
	}
	tw.Flush()

	if _, ok := cur.metrics[coordinator.RouteMetric]; ok {
		n := func(outcome string) int {
			sel := map[string]string{"outcome": outcome}
			c, p := cur.metrics.sum(coordinator.RouteMetric, sel), prev.metrics.sum(coordinator.RouteMetric, sel)
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
func recentQuantile(cur, prev promSamples, name string, sel map[string]string) float64 {
	c := cur.buckets(name, sel)
	if v := quantile(0.5, delta(c, prev.buckets(name, sel))); !math.IsNaN(v) {
		return v
	}
	return quantile(0.5, c)
}
