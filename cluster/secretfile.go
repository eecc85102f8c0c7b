package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// SecretFileNone as the secret path runs without a secret even if the
// default file exists.
const SecretFileNone = "none"

// DefaultSecretPath is $MACPOOL_HOME/cluster.secret, else
// $HOME/.config/macpool/cluster.secret (also on macOS: one path to scp
// to). getenv is os.Getenv in the product.
func DefaultSecretPath(getenv func(string) string) (string, error) {
	if h := getenv("MACPOOL_HOME"); h != "" {
		return filepath.Join(h, "cluster.secret"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("cluster secret: no home folder (set MACPOOL_HOME or pass the path)")
	}
	return filepath.Join(home, ".config", "macpool", "cluster.secret"), nil
}

// FindSecret loads the cluster secret that up, coordinator, worker and the
// admin commands use: path (the -secret-file flag), else
// $MACPOOL_SECRET_FILE, else the default file if it exists. A file that was
// named must exist; SecretFileNone, or no default file, gives a nil secret.
// It returns the path it loaded.
func FindSecret(path string, getenv func(string) string) (*Secret, string, error) {
	explicit := true
	if path == "" {
		path = getenv("MACPOOL_SECRET_FILE")
	}
	if path == "" {
		explicit = false
		var err error
		if path, err = DefaultSecretPath(getenv); err != nil {
			path = ""
		}
	}
	switch {
	case path == SecretFileNone, path == "":
		return nil, "", nil
	case !explicit:
		if _, err := os.Stat(path); err != nil {
			return nil, "", nil
		}
	}
	s, err := LoadSecret(path)
	if err != nil {
		return nil, "", err
	}
	return s, path, nil
}

// ExposedAddrs are the listen addresses (host:port) among addrs that other
// machines can reach: all but the empty and the loopback ones. A cluster
// without a secret warns about them.
func ExposedAddrs(addrs ...string) []string {
	var open []string
	for _, a := range addrs {
		if a != "" && !isLoopbackAddr(a) {
			open = append(open, a)
		}
	}
	return open
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CreateDefaultSecret makes a new cluster secret and writes it (mode 0600)
// to the default path; if another node won the race to create it, that
// one is loaded instead. created says whether this call wrote it.
func CreateDefaultSecret(getenv func(string) string) (s *Secret, path string, created bool, err error) {
	if path, err = DefaultSecretPath(getenv); err != nil {
		return nil, "", false, err
	}
	if s, err = NewSecret(); err != nil {
		return nil, "", false, err
	}
	if err = WriteSecret(path, s, false); err == nil {
		return s, path, true, nil
	}
	if !errors.Is(err, ErrSecretExists) {
		return nil, "", false, err
	}
	s, err = LoadSecret(path)
	return s, path, false, err
}

// ShowSecret hands a line that holds a secret (a join token, an API key)
// to the operator: intro and line written to w when w is a terminal, else —
// w is then a service's log file, which others may read — line alone to
// path with mode 0600; it returns where the line went ("" for the terminal).
func ShowSecret(w io.Writer, intro, line, path string) (string, error) {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			_, err := io.WriteString(w, intro+line)
			return "", err
		}
	}
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// InitSecret writes a new cluster secret to path (ErrSecretExists, kept,
// unless force: a rotation) and tells the operator on w how to copy it to
// the other Macs and how the nodes find it.
func InitSecret(path string, force bool, getenv func(string) string, w io.Writer) error {
	s, err := NewSecret()
	if err != nil {
		return err
	}
	if err := WriteSecret(path, s, force); err != nil {
		if errors.Is(err, ErrSecretExists) {
			return fmt.Errorf("%w: keeping it (-force replaces it; every machine then needs the new file)", err)
		}
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	fmt.Fprintf(w, "wrote cluster secret %s (id %s, mode 0600)\n\n", abs, s.ID())
	// Where to put it on the other Macs: the same place relative to the
	// home folder (user names differ between Macs), else the same path.
	remote, remoteDir, shown := abs, filepath.Dir(abs), abs
	if home, err := os.UserHomeDir(); err == nil {
		if rel, err := filepath.Rel(home, abs); err == nil && !strings.HasPrefix(rel, "..") {
			remote, remoteDir, shown = rel, "~/"+filepath.Dir(rel), "~/"+rel
		}
	}
	fmt.Fprintf(w, "Anyone who has this file can join the cluster and read its traffic. Copy it\n"+
		"only to your own Macs, over ssh, e.g.:\n\n"+
		"  ssh OTHER-MAC 'mkdir -p -m 700 %s'\n"+
		"  scp -p %s OTHER-MAC:%s\n\n", remoteDir, abs, remote)
	if def, err := DefaultSecretPath(getenv); err == nil && def == path && getenv("MACPOOL_HOME") == "" {
		fmt.Fprintf(w, "macpool up, coordinator and worker load it from there by default.\n")
	} else {
		fmt.Fprintf(w, "Start macpool up, coordinator and worker with -secret-file %s\n(or MACPOOL_SECRET_FILE=%s).\n", shown, shown)
	}
	fmt.Fprintf(w, "Every node logs \"cluster secret ... id=%s\": nodes with other ids cannot join.\n", s.ID())
	return nil
}
