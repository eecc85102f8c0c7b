package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/macpool/macpool/client"
)

func init() {
	register("status", "print the cluster's nodes, roles, models and load", runStatus)
	register("top", "live terminal view of nodes, load, queues, requests/s, tokens/s and TTFT", runTop)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", stderr)
	addr := fs.String("http", "127.0.0.1:8080", "HTTP address of any coordinator")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	key := fs.String("api-key", "", "API key, needed once the cluster stores keys (default $MACPOOL_API_KEY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := client.New(*addr, orEnv(*key, "MACPOOL_API_KEY"), nil)
	if err != nil {
		return usageErr(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, raw, err := c.Status(ctx)
	if err != nil {
		return usageErr(err)
	}
	if *asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	return client.PrintStatus(stdout, st)
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
	c, err := client.New(*addr, orEnv(*key, "MACPOOL_API_KEY"), &http.Client{Timeout: 5 * time.Second})
	if err != nil {
		return usageErr(err)
	}
	return usageErr(c.Top(ctx, stdout, *interval, *once))
}

// orEnv is v, else the environment variable env.
func orEnv(v, env string) string {
	if v == "" {
		return os.Getenv(env)
	}
	return v
}
