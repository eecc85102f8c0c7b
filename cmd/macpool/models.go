package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/hub"
)

func init() {
	register("models", "manage the model registry: models add REF|PATH [-wait] | models rm NAME | models ls", runModels)
}

const modelsUsage = `usage: macpool models add REF|PATH [-name NAME] [-node WORKER] [-replicas N] [-size BYTES] [-wait] [-coordinator ADDR] [-admin-key KEY]
       macpool models rm NAME
       macpool models ls [-json]

add registers a model: a Hugging Face reference (ORG/NAME[@REV][:FILE|QUANT]) is
downloaded once, by one worker, and the others pull it from their peers; a
local PATH is served in place by the worker named by -node (default: every
worker that has the path) and pulled from it by the others. Placement puts
the model on the workers whose memory fits it (-replicas N: at most N).`

func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, modelsUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: a subcommand is required (add, rm, ls)", errUsage)
		}
		return nil
	}
	verb, rest := args[0], args[1:]
	fs := newFlagSet("models "+verb, stderr)
	var af adminFlags
	af.register(fs)
	switch verb {
	case "add":
		var req coordinator.AddModelRequest
		fs.StringVar(&req.Name, "name", "", "name clients use (default: the reference, or the folder's base name)")
		fs.StringVar(&req.SourceNode, "node", "", "worker that has a local PATH (default: any worker where the path exists)")
		fs.IntVar(&req.Replicas, "replicas", 0, "place on at most N workers (0: every worker with room)")
		fs.Int64Var(&req.Size, "size", 0, "model size in bytes for placement (default: measured for a local path; else reported by the first worker that has it)")
		wait := fs.Bool("wait", false, "show progress until every placed worker serves the model")
		timeout := fs.Duration("timeout", 0, "with -wait: give up after this long (0: never)")
		src, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if src == "" {
			return fmt.Errorf("%w: models add needs a Hugging Face reference or a local path", errUsage)
		}
		if err := modelSource(&req, src); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, requestTimeout)
		var spec coordinator.ModelSpec
		err = af.call(actx, "POST", coordinator.ModelsPath, req, &spec)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added model %s (source %s)\n", spec.Name, spec.Source)
		if !*wait {
			return nil
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		return waitModel(ctx, &af, spec.Name, stdout)
	case "rm", "remove":
		name, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if name == "" {
			return fmt.Errorf("%w: models rm needs the model name", errUsage)
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if err := af.call(ctx, "DELETE", coordinator.ModelsPath+"/"+url.PathEscape(name), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed model %s\n", name)
		return nil
	case "ls", "list":
		asJSON := fs.Bool("json", false, "print the raw JSON")
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		list, raw, err := listModels(ctx, &af)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := stdout.Write(raw)
			return err
		}
		return printModels(stdout, list)
	}
	return fmt.Errorf("%w: unknown models subcommand %q (add, rm, ls)", errUsage, verb)
}

// modelSource fills the request's source: a local path is made absolute
// (workers resolve it themselves) and measured; anything else must parse
// as a Hugging Face reference.
func modelSource(req *coordinator.AddModelRequest, src string) error {
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
			return fmt.Errorf("%w: %s does not exist here: name the worker that has it with -node", errUsage, src)
		}
		return nil
	}
	if _, err := hub.ParseRef(src); err != nil {
		return fmt.Errorf("%w: %s is neither a local path nor a Hugging Face reference: %v", errUsage, src, err)
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

func listModels(ctx context.Context, af *adminFlags) ([]coordinator.ModelStatus, []byte, error) {
	var raw json.RawMessage
	if err := af.call(ctx, "GET", coordinator.ModelsPath, nil, &raw); err != nil {
		return nil, nil, err
	}
	var list struct {
		Data []coordinator.ModelStatus `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, fmt.Errorf("decode models: %w", err)
	}
	return list.Data, raw, nil
}

func printModels(w io.Writer, list []coordinator.ModelStatus) error {
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

// stateText is a worker's state, with a progress bar while fetching.
func stateText(s coordinator.WorkerModelState) string {
	t := s.State
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

// waitModel prints each worker's progress (a line when it changes) until
// every worker the model is placed on serves it.
func waitModel(ctx context.Context, af *adminFlags, name string, w io.Writer) error {
	last := map[string]string{}
	start, hinted := time.Now(), false
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		list, _, err := listModels(rctx, af)
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
				if s.State != cluster.ModelReady && s.State != "serving" {
					ready = false
				}
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
