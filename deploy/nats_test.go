package deploy

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestNATSClusterConfig checks that the example cluster config is accepted
// by nats-server's own parser, with the values the README says to set.
func TestNATSClusterConfig(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "mac-a")
	opts, err := server.ProcessConfigFile("nats/cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	if opts.ServerName != "mac-a" || !opts.JetStream || opts.Cluster.Name != "macpool" || len(opts.Routes) != 3 {
		t.Fatalf("got server %q jetstream %v cluster %q routes %d, want mac-a true macpool 3",
			opts.ServerName, opts.JetStream, opts.Cluster.Name, len(opts.Routes))
	}
	if opts.JetStreamMaxStore != 8<<30 || opts.MaxPayload != 8<<20 {
		t.Fatalf("got file store %d, max payload %d, want 8GB and 8MB", opts.JetStreamMaxStore, opts.MaxPayload)
	}
}
