package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/hub"
)

// sortNodes lists coordinators before workers, each by name.
func sortNodes(nodes []admin.NodeStatus) {
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].Role != nodes[j].Role {
			return nodes[i].Role < nodes[j].Role
		}
		return nodes[i].Name < nodes[j].Name
	})
}

// PrintStatus writes the table of macpool status.
func PrintStatus(w io.Writer, st admin.Status) error {
	nodes := append([]admin.NodeStatus(nil), st.Nodes...)
	sortNodes(nodes)
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "coordinator %s, raft leader %s\n\n", st.Coordinator, leader)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tADDRESS\tHARDWARE\tMODELS\tLOAD")
	for _, n := range nodes {
		role := n.Role
		if n.Raft != "" {
			role += " (" + n.Raft + ")"
		}
		if n.Leaving {
			role += " (draining)"
		}
		hw := fmt.Sprintf("%s, %d cores, %.1f GB", n.Chip, n.Cores, float64(n.MemoryMB)/1024)
		if n.GPUCores > 0 {
			hw += fmt.Sprintf(", %d GPU cores", n.GPUCores)
		}
		load := "-"
		if n.Slots > 0 {
			load = fmt.Sprintf("%d/%d busy", n.Running, n.Slots)
		}
		models := strings.Join(n.Models, ",")
		if models == "" {
			models = "-"
		}
		addr := n.Addr
		if n.HTTP != "" {
			addr += " http " + n.HTTP
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, role, addr, hw, models, load)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var piped []admin.ModelSpec
	for _, m := range st.Models {
		if len(m.Stages) > 0 {
			piped = append(piped, m)
		}
	}
	sort.Slice(piped, func(i, j int) bool { return piped[i].Name < piped[j].Name })
	if len(piped) > 0 {
		fmt.Fprintln(w)
	}
	for _, m := range piped {
		fmt.Fprintf(w, "pipeline %s: %s\n", m.Name, StagesText(m.Stages))
	}
	if len(st.Queued) > 0 {
		names := make([]string, 0, len(st.Queued))
		for m := range st.Queued {
			names = append(names, m)
		}
		sort.Strings(names)
		fmt.Fprintln(w)
		for _, m := range names {
			fmt.Fprintf(w, "queued %s: %d\n", m, st.Queued[m])
		}
	}
	return nil
}

// PrintKeys writes the table of macpool keys list.
func PrintKeys(w io.Writer, keys []admin.KeyInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tADMIN\tCREATED\tLAST USED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", k.ID, k.Name, k.Admin, unixTime(k.Created), unixTime(k.LastUsed))
	}
	return tw.Flush()
}

func unixTime(s int64) string {
	if s == 0 {
		return "-"
	}
	return time.Unix(s, 0).UTC().Format("2006-01-02 15:04 UTC")
}

// PrintModels writes the table of macpool models ls.
func PrintModels(w io.Writer, list []admin.ModelStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tSOURCE\tPLACED ON\tWORKERS")
	for _, m := range list {
		size := "?"
		if m.Size > 0 {
			size = humanBytes(m.Size)
		}
		src := m.Source
		if m.SourceNode != "" {
			src += " (on " + m.SourceNode + ")"
		}
		placed := strings.Join(m.Assigned, ",")
		switch {
		case len(m.Stages) > 0:
			placed = fmt.Sprintf("pipeline epoch %d: %s", m.Epoch, StagesText(m.Stages))
		case !m.Managed:
			placed = "(started with -model)"
		case placed == "":
			placed = "(no worker has room)"
		}
		var ws []string
		for _, s := range m.Workers {
			ws = append(ws, s.Worker+": "+stateText(s))
		}
		if len(ws) == 0 {
			ws = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, size, src, placed, strings.Join(ws, "; "))
	}
	return tw.Flush()
}

// StagesText is a pipeline's stages: "w1 [0,10) w2 [10,20)".
func StagesText(stages []admin.Stage) string {
	parts := make([]string, len(stages))
	for i, s := range stages {
		parts[i] = fmt.Sprintf("%s [%d,%d)", s.Worker, s.First, s.Last)
	}
	return strings.Join(parts, " ")
}

// stateText is a worker's state, with a progress bar while fetching.
func stateText(s admin.WorkerModelState) string {
	t := s.State
	if s.Stage != "" {
		t += " " + s.Stage
	}
	if s.From != "" && (s.State == cluster.ModelFetching || s.State == cluster.ModelReady) {
		t += " (" + s.From + ")"
	}
	if s.State == cluster.ModelFetching && s.Total > 0 {
		t += " " + progressBar(s.Bytes, s.Total, 20)
	}
	if s.Error != "" {
		t += ": " + s.Error
	}
	return t
}

// progressBar renders "[#####.....]  50% 1.2 GB/2.4 GB".
func progressBar(n, total int64, width int) string {
	if total <= 0 {
		return humanBytes(n)
	}
	frac := min(max(float64(n)/float64(total), 0), 1)
	full := int(frac * float64(width))
	return fmt.Sprintf("[%s%s] %3.0f%% %s/%s", strings.Repeat("#", full), strings.Repeat(".", width-full), 100*frac, humanBytes(n), humanBytes(total))
}

func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// callTimeout bounds one call of a polling loop.
const callTimeout = 30 * time.Second

// WaitModel prints each worker's progress (a line when it changes) until
// every worker the model is placed on serves it.
func (c *Client) WaitModel(ctx context.Context, name string, w io.Writer) error {
	last := map[string]string{}
	start, hinted := time.Now(), false
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		list, _, err := c.Models(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return err
		}
		for _, m := range list {
			if m.Name != name {
				continue
			}
			ready := len(m.Assigned) > 0
			// The leader places within a second or two; still nothing
			// means no worker has room (or none takes placed models).
			if !ready && !hinted && time.Since(start) > 5*time.Second {
				fmt.Fprintf(w, "%s is not placed yet: no worker with a model store has room for it (size %s); still waiting\n", name, humanBytes(m.Size))
				hinted = true
			}
			for _, s := range m.Workers {
				line := stateText(s)
				if last[s.Worker] != line {
					fmt.Fprintf(w, "%s %s: %s\n", name, s.Worker, line)
					last[s.Worker] = line
				}
				switch {
				case s.State == cluster.ModelStored && len(m.Stages) > 0:
					// a pipeline's seed only holds the files
				case s.State != cluster.ModelReady && s.State != "serving":
					ready = false
				}
			}
			if ready && len(m.Stages) > 0 {
				fmt.Fprintf(w, "%s is served as a pipeline: %s\n", name, StagesText(m.Stages))
				return nil
			}
			if ready {
				fmt.Fprintf(w, "%s is served by %s\n", name, strings.Join(m.Assigned, ", "))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// WaitDrained polls node's drain progress, printing the running job count
// when it changes (last: the count already shown), until the node has left
// the cluster or wait has passed. Failed polls are reported on stderr and
// retried.
func (c *Client) WaitDrained(ctx context.Context, node string, last int, wait time.Duration, stdout, stderr io.Writer) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s is still in the cluster after %v", node, wait)
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.DrainState(rctx, node)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "%v (retrying)\n", err)
			continue
		}
		if !st.Present {
			fmt.Fprintf(stdout, "%s: left the cluster\n", node)
			return nil
		}
		if st.Running != last {
			fmt.Fprintf(stdout, "%s: %d job(s) running\n", node, st.Running)
			last = st.Running
		}
	}
}

// ErrSource marks a model source that is neither a local path nor a
// Hugging Face reference (a usage error of macpool models add).
var ErrSource = errors.New("bad model source")

// ModelSource fills the request's source: a local path is made absolute
// (workers resolve it themselves) and measured; anything else must parse
// as a Hugging Face reference.
func ModelSource(req *admin.AddModelRequest, src string) error {
	if hub.IsLocal(src) {
		abs, err := filepath.Abs(src)
		if err != nil {
			return fmt.Errorf("model path %s: %w", src, err)
		}
		req.Source = abs
		if req.Size == 0 {
			req.Size = pathSize(abs)
		}
		return nil
	}
	if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") {
		req.Source = src // a path on another machine (-node)
		if req.SourceNode == "" {
			return fmt.Errorf("%w: %s does not exist here: name the worker that has it with -node", ErrSource, src)
		}
		return nil
	}
	if _, err := hub.ParseRef(src); err != nil {
		return fmt.Errorf("%w: %s is neither a local path nor a Hugging Face reference: %v", ErrSource, src, err)
	}
	req.Source = src
	return nil
}

// pathSize sums the sizes of the regular files under p (links followed).
func pathSize(p string) int64 {
	var n int64
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if q != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if st, err := os.Stat(q); err == nil && st.Mode().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			n += st.Size()
		}
		return nil
	})
	return n
}
