package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/coordinator"
)

func init() {
	register("status", "print the cluster's nodes, roles, models and load", runStatus)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	addr := fs.String("http", "127.0.0.1:8080", "HTTP address of any coordinator")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	key := fs.String("api-key", "", "API key, needed once the cluster stores keys (default $MACPOOL_API_KEY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	url := *addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+coordinator.StatusPath, nil)
	if err != nil {
		return fmt.Errorf("%w: -http %q: %v", errUsage, *addr, err)
	}
	if *key == "" {
		*key = os.Getenv("MACPOOL_API_KEY")
	}
	if *key != "" {
		req.Header.Set("Authorization", "Bearer "+*key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask %s: %w", *addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status from %s: %s: %s", *addr, resp.Status, strings.TrimSpace(string(body)))
	}
	if *asJSON {
		_, err := stdout.Write(body)
		return err
	}
	var st coordinator.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("decode status: %w", err)
	}
	return printStatus(stdout, st)
}

func printStatus(w io.Writer, st coordinator.Status) error {
	sort.Slice(st.Nodes, func(i, j int) bool {
		if st.Nodes[i].Role != st.Nodes[j].Role {
			return st.Nodes[i].Role < st.Nodes[j].Role
		}
		return st.Nodes[i].Name < st.Nodes[j].Name
	})
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "coordinator %s, raft leader %s\n\n", st.Coordinator, leader)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tADDRESS\tHARDWARE\tMODELS\tLOAD")
	for _, n := range st.Nodes {
		role := n.Role
		if n.Raft != "" {
			role += " (" + n.Raft + ")"
		}
		if n.Leaving {
			role += " (draining)" // drain.go
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
