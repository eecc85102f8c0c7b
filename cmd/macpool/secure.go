package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/macpool/macpool/cluster"
)

// Secure by default: gossip, NATS, Raft and the model store never run in
// plaintext unless -insecure (or -secret-file none) says so. A coordinator
// (or up) that finds no cluster secret creates one in the default place
// (0600) and prints a join token (gossip address + secret), so another Mac
// joins with `macpool worker --join TOKEN`; a worker without a secret
// refuses to start.

// errNoSecret: a worker found no cluster secret and was not told -insecure.
var errNoSecret = fmt.Errorf("%w: no cluster secret: join with the token a coordinator printed (macpool worker --join TOKEN), "+
	"copy the secret file of a coordinator (docs/security.md), or run in plaintext with -insecure", errUsage)

// optedOut reports whether the node was told to run without a secret.
func (f *clusterFlags) optedOut() bool { return f.insecure || f.secretFile == "none" }

// createSecret gives a new cluster its secret (cluster.CreateDefaultSecret).
func (f *clusterFlags) createSecret(logger *slog.Logger) (*cluster.Secret, error) {
	s, path, created, err := cluster.CreateDefaultSecret(os.Getenv)
	if err != nil {
		return nil, err
	}
	if created {
		logger.Info("created the cluster secret (mode 0600): gossip, NATS and Raft encrypted and authenticated; run with -insecure for plaintext", "file", path, "id", s.ID())
	}
	f.secret, f.secretLoaded = s, true
	return s, nil
}

// useJoinToken turns -join TOKEN into the token's gossip addresses and
// secret.
func (f *clusterFlags) useJoinToken() error {
	if !cluster.IsJoinToken(f.join) {
		return nil
	}
	addrs, s, err := cluster.ParseJoinToken(f.join)
	if err != nil {
		return fmt.Errorf("%w: -join: %v", errUsage, err)
	}
	if f.secretLoaded || (f.secretFile != "" && f.secretFile != "none") {
		return fmt.Errorf("%w: -join TOKEN carries the cluster secret; drop -secret-file", errUsage)
	}
	f.join = strings.Join(addrs, ",")
	f.secret, f.secretLoaded = s, true
	return nil
}

// printJoinToken prints the command that joins another Mac; the token
// holds the secret, so only a terminal sees it (cluster.ShowSecret).
func printJoinToken(stdout io.Writer, s *cluster.Secret, gossip, dataDir string, logger *slog.Logger) {
	line := fmt.Sprintf("macpool worker --join %s --model MODEL\n", cluster.JoinToken(s, []string{gossip}))
	path, err := cluster.ShowSecret(stdout, "join another Mac (the token holds the cluster secret):\n  ", line, filepath.Join(dataDir, "join-token"))
	switch {
	case err != nil:
		logger.Warn("writing the join token", "err", err)
	case path != "":
		fmt.Fprintf(stdout, "join token for another Mac written to %s (mode 0600; it holds the cluster secret)\n", path)
	}
}
