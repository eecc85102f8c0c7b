package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
)

// adminFlags are the flags of the commands that call a coordinator's admin
// endpoints (macpool keys, macpool drain; coordinator/keys.go).
type adminFlags struct {
	coordinator string
	key         string
	secretFile  string
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.coordinator, "coordinator", "127.0.0.1:8080", "HTTP address (or URL) of any coordinator")
	fs.StringVar(&f.key, "admin-key", "", "admin API key (default $MACPOOL_ADMIN_KEY, else $MACPOOL_API_KEY, else the admin token of the cluster secret file); not needed while the cluster is open (no keys, no secret)")
	fs.StringVar(&f.secretFile, "secret-file", "", `cluster secret whose admin token is sent when no admin key is given (default: $MACPOOL_SECRET_FILE, else the default file if it exists; "none": never)`)
}

// credential is the bearer token of admin calls: -admin-key, the
// environment, else the admin token derived from the cluster secret.
func (f *adminFlags) credential() (string, error) {
	key := f.key
	for _, env := range []string{"MACPOOL_ADMIN_KEY", "MACPOOL_API_KEY"} {
		if key == "" {
			key = os.Getenv(env)
		}
	}
	if key != "" {
		return key, nil
	}
	path, explicit := f.secretFile, true
	if path == "" {
		path = os.Getenv("MACPOOL_SECRET_FILE")
	}
	if path == "" {
		explicit = false
		if def, err := defaultSecretPath(); err == nil && exists(def) {
			path = def
		}
	}
	if path == "" || path == secretFileNone || (!explicit && !exists(path)) {
		return "", nil
	}
	s, err := cluster.LoadSecret(path)
	if err != nil {
		return "", err
	}
	return s.AdminToken(), nil
}

// call sends an admin request and decodes a 2xx JSON answer into out.
func (f *adminFlags) call(ctx context.Context, method, path string, body, out any) error {
	url := f.coordinator
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(url, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("%w: -coordinator %q: %v", errUsage, f.coordinator, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	key, err := f.credential()
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask %s: %w", f.coordinator, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", f.coordinator, err)
	}
	if resp.StatusCode/100 != 2 {
		var e openai.ErrorResponse
		if json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Message != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer of %s: %w", f.coordinator, err)
		}
	}
	return nil
}

// splitVerb separates a leading positional argument (a verb or a node
// name) from the flags that follow it; flags may also come first.
func splitVerb(fs *flag.FlagSet, args []string) (string, error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], parseFlags(fs, args[1:])
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return "", err
		}
		return "", fmt.Errorf("%w: %v", errUsage, err)
	}
	switch fs.NArg() {
	case 0:
		return "", nil
	case 1:
		return fs.Arg(0), nil
	}
	return "", fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(1))
}

// requestTimeout bounds one admin call.
const requestTimeout = 30 * time.Second
