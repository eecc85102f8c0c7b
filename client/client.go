// Package client is the CLI's HTTP client of a coordinator: cluster status,
// the model registry, API keys, drains and the Prometheus metrics, and the
// tables and the live view (Top) that macpool prints from them. It reads no
// flags and no environment: the caller passes the address and the key.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
)

// ErrAddress is returned by New for an address that is no URL.
var ErrAddress = errors.New("bad coordinator address")

// maxAnswer bounds the body read of one answer; metrics of a large cluster
// are the biggest.
const maxAnswer = 32 << 20

// Client talks to one coordinator. Its methods are safe for concurrent use.
type Client struct {
	addr string // as given, for messages
	base string // scheme://host[:port] without a trailing slash
	key  string
	hc   *http.Client
}

// New returns a client of the coordinator at addr (host:port or a URL),
// sending key as the bearer token when it is not empty. hc may be nil
// (http.DefaultClient).
func New(addr, key string, hc *http.Client) (*Client, error) {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	base = strings.TrimRight(base, "/")
	if _, err := url.Parse(base); err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrAddress, addr, err)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{addr: addr, base: base, key: key, hc: hc}, nil
}

// Base is the coordinator's URL without a trailing slash.
func (c *Client) Base() string { return c.base }

// get fetches path and returns the body of a 200 answer.
func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrAddress, c.addr, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", c.addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("read %s%s: %w", c.base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s: %s", c.base, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// Call sends a JSON request (body may be nil) and decodes a 2xx JSON answer
// into out (out may be nil). A failed answer's OpenAI-style error message
// becomes the error.
func (c *Client) Call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("%w %q: %v", ErrAddress, c.addr, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("ask %s: %w", c.addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("read answer of %s: %w", c.addr, err)
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
			return fmt.Errorf("decode answer of %s: %w", c.addr, err)
		}
	}
	return nil
}

// Status returns the cluster status and the raw JSON it was decoded from.
func (c *Client) Status(ctx context.Context) (admin.Status, []byte, error) {
	var st admin.Status
	body, err := c.get(ctx, admin.StatusPath)
	if err != nil {
		return st, nil, err
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, nil, fmt.Errorf("decode status: %w", err)
	}
	return st, body, nil
}

// Models lists the model registry, with the raw JSON.
func (c *Client) Models(ctx context.Context) ([]admin.ModelStatus, []byte, error) {
	var raw json.RawMessage
	if err := c.Call(ctx, http.MethodGet, admin.ModelsPath, nil, &raw); err != nil {
		return nil, nil, err
	}
	var list struct {
		Data []admin.ModelStatus `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, fmt.Errorf("decode models: %w", err)
	}
	return list.Data, raw, nil
}

// AddModel registers a model.
func (c *Client) AddModel(ctx context.Context, req admin.AddModelRequest) (admin.ModelSpec, error) {
	var spec admin.ModelSpec
	err := c.Call(ctx, http.MethodPost, admin.ModelsPath, req, &spec)
	return spec, err
}

// RemoveModel removes a model from the registry.
func (c *Client) RemoveModel(ctx context.Context, name string) error {
	return c.Call(ctx, http.MethodDelete, admin.ModelsPath+"/"+url.PathEscape(name), nil, nil)
}

// CreateKey creates an API key; the answer holds the only copy of its secret.
func (c *Client) CreateKey(ctx context.Context, req admin.KeyRequest) (admin.CreatedKey, error) {
	var k admin.CreatedKey
	err := c.Call(ctx, http.MethodPost, admin.Path+"keys", req, &k)
	return k, err
}

// Keys lists the API keys.
func (c *Client) Keys(ctx context.Context) ([]admin.KeyInfo, error) {
	var list struct {
		Data []admin.KeyInfo `json:"data"`
	}
	err := c.Call(ctx, http.MethodGet, admin.Path+"keys", nil, &list)
	return list.Data, err
}

// RevokeKey revokes the key id.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.Call(ctx, http.MethodDelete, admin.Path+"keys/"+url.PathEscape(id), nil, nil)
}

// Drain starts draining node; running jobs get timeoutMS to finish (0: the
// worker's own drain timeout).
func (c *Client) Drain(ctx context.Context, node string, timeoutMS int64) (admin.DrainResponse, error) {
	var resp admin.DrainResponse
	err := c.Call(ctx, http.MethodPost, admin.Path+"drain", map[string]any{"node": node, "timeout_ms": timeoutMS}, &resp)
	return resp, err
}

// DrainState is node's drain progress.
func (c *Client) DrainState(ctx context.Context, node string) (admin.NodeDrainState, error) {
	var st admin.NodeDrainState
	err := c.Call(ctx, http.MethodGet, admin.Path+"drain/"+url.PathEscape(node), nil, &st)
	return st, err
}
