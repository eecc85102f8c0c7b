package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/coordinator"
)

// With RequireKeys (an API beyond loopback) a cluster without keys is
// closed, not open: the API and the admin endpoints refuse callers until
// an admin key exists, and then serve it.
func TestRequireKeys(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.RequireKeys = true
	c, _ := startCoordinator(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eventually(t, 10*time.Second, "state loaded", c.StateLoaded)
	if _, err := c.Check(ctx, ""); !isStatus(err, 401) {
		t.Fatalf("anonymous API call with no keys stored: got %v, want 401", err)
	}
	if err := c.CheckAdmin(ctx, ""); !isStatus(err, 401) {
		t.Fatalf("anonymous admin call with no keys stored: got %v, want 401", err)
	}
	if c.AdminOpen() {
		t.Fatal("AdminOpen with RequireKeys: want false")
	}
	k, err := c.CreateAPIKey(ctx, coordinator.KeyRequest{ID: "admin", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := c.Check(ctx, k.Secret); err != nil || id != "admin" {
		t.Fatalf("API call with the admin key: %q %v", id, err)
	}
	if err := c.CheckAdmin(ctx, k.Secret); err != nil {
		t.Fatalf("admin call with the admin key: %v", err)
	}
}

func isStatus(err error, status int) bool {
	oe, ok := err.(*openai.Error)
	return ok && oe.HTTPStatus() == status
}
