package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	s, err := cluster.NewSecret()
	if err != nil {
		return err
	}
	if err := cluster.WriteSecret(path, s, *force); err != nil {
		if errors.Is(err, cluster.ErrSecretExists) {
			return fmt.Errorf("%w: keeping it (-force replaces it; every machine then needs the new file)", err)
		}
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	fmt.Fprintf(stdout, "wrote cluster secret %s (id %s, mode 0600)\n\n", abs, s.ID())
	// Where to put it on the other Macs: the same place relative to the
	// home folder (user names differ between Macs), else the same path.
	remote, remoteDir, shown := abs, filepath.Dir(abs), abs
	if home, err := os.UserHomeDir(); err == nil {
		if rel, err := filepath.Rel(home, abs); err == nil && !strings.HasPrefix(rel, "..") {
			remote, remoteDir, shown = rel, "~/"+filepath.Dir(rel), "~/"+rel
		}
	}
	fmt.Fprintf(stdout, "Anyone who has this file can join the cluster and read its traffic. Copy it\n"+
		"only to your own Macs, over ssh, e.g.:\n\n"+
		"  ssh OTHER-MAC 'mkdir -p -m 700 %s'\n"+
		"  scp -p %s OTHER-MAC:%s\n\n", remoteDir, abs, remote)
	if def, err := cluster.DefaultSecretPath(os.Getenv); err == nil && def == path && os.Getenv("MACPOOL_HOME") == "" {
		fmt.Fprintf(stdout, "macpool up, coordinator and worker load it from there by default.\n")
	} else {
		fmt.Fprintf(stdout, "Start macpool up, coordinator and worker with -secret-file %s\n(or MACPOOL_SECRET_FILE=%s).\n", shown, shown)
	}
	fmt.Fprintf(stdout, "Every node logs \"cluster secret ... id=%s\": nodes with other ids cannot join.\n", s.ID())
	return nil
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
