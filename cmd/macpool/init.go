package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/macpool/macpool/cluster"
)

// The cluster secret (docs/security.md): `macpool init` writes it; up,
// coordinator and worker load it (flag -secret-file, else
// $MACPOOL_SECRET_FILE, else the default file if it exists) and derive the
// gossip key, NATS credentials and TLS CA from it.

func init() {
	register("init", "make a new cluster secret (encrypts and authenticates gossip, NATS and Raft); copy it to every Mac", runInit)
}

func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("init", stderr)
	out := fs.String("out", "", "secret file to write (default: $MACPOOL_SECRET_FILE, else $MACPOOL_HOME/cluster.secret, else ~/.config/macpool/cluster.secret)")
	force := fs.Bool("force", false, "replace an existing secret file (every machine then needs the new one: a rotation)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := *out
	if path == "" {
		path = os.Getenv("MACPOOL_SECRET_FILE")
	}
	if path == "" {
		var err error
		if path, err = cluster.DefaultSecretPath(os.Getenv); err != nil {
			return err
		}
	}
	return cluster.InitSecret(path, *force, os.Getenv, stdout)
}

// clusterSecret loads the cluster secret once (cached in f, so up's
// worker shares the coordinator's): -secret-file, else
// $MACPOOL_SECRET_FILE, else the default file if it exists. A file that
// was asked for must exist. Without a secret it warns when any of addrs
// (listen addresses) is reachable from other machines.
func (f *clusterFlags) clusterSecret(logger *slog.Logger, addrs ...string) (*cluster.Secret, error) {
	if f.secretLoaded {
		return f.secret, nil
	}
	if f.insecure { // secure.go: -insecure is -secret-file none
		if f.secretFile != "" && f.secretFile != "none" {
			return nil, fmt.Errorf("%w: -insecure and -secret-file %s contradict each other", errUsage, f.secretFile)
		}
		f.secretFile = "none"
	}
	s, path, err := cluster.FindSecret(f.secretFile, os.Getenv)
	if err != nil {
		return nil, err
	}
	f.secret, f.secretLoaded = s, true
	if s != nil {
		logger.Info("cluster secret: gossip, NATS and Raft encrypted and authenticated", "file", path, "id", s.ID())
		return s, nil
	}
	if open := cluster.ExposedAddrs(addrs...); len(open) > 0 {
		logger.Warn("no cluster secret: anyone on the network can join this cluster and read its traffic (gossip, NATS queue, Raft); run 'macpool init' and copy the file to every Mac",
			"listening", strings.Join(open, ","))
	}
	return nil, nil
}

// useClusterSecret makes LAN discovery look for (and advertise) only the
// cluster of s, unless -cluster-secret / $MACPOOL_CLUSTER_SECRET set one.
func (f *discoveryFlags) useClusterSecret(s *cluster.Secret) {
	if s != nil && f.secret == "" && os.Getenv("MACPOOL_CLUSTER_SECRET") == "" {
		f.secret = s.DiscoveryToken()
	}
}
