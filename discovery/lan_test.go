package discovery

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Advertise announces a coordinator (dots in its name replaced) until ctx
// ends, and Find returns its gossip address; a loopback gossip address is
// never advertised, and Find without a coordinator names the way out.
func TestAdvertiseAndFind(t *testing.T) {
	net := &memNet{}
	cfg := testConfig(net)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	adv := cfg
	adv.Instance, adv.Gossip = "studio.local", "10.0.0.1:7946"
	go func() { Advertise(ctx, adv); close(done) }()
	waitFor(t, "the advertisement", func() bool { return net.count() == 1 })

	var progress bytes.Buffer
	addrs, err := Find(context.Background(), cfg, 5*time.Second, &progress)
	if err != nil || len(addrs) != 1 || addrs[0] != "10.0.0.1:7946" {
		t.Fatalf("Find = %v, %v; want [10.0.0.1:7946]", addrs, err)
	}
	if !strings.Contains(progress.String(), `found cluster "macpool": joining 10.0.0.1:7946`) {
		t.Errorf("progress %q", progress.String())
	}
	cancel()
	<-done
	if n := net.count(); n != 0 {
		t.Errorf("%d advertisements left after ctx ended, want 0", n)
	}

	loop := cfg
	loop.Instance, loop.Gossip = "c1", "127.0.0.1:7946"
	Advertise(context.Background(), loop) // returns at once: nothing to advertise
	if n := net.count(); n != 0 {
		t.Errorf("loopback gossip advertised (%d entries)", n)
	}
	_, err = Find(context.Background(), cfg, 50*time.Millisecond, &progress)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "pass -join HOST:PORT") {
		t.Errorf("Find without a coordinator: %v", err)
	}
}
