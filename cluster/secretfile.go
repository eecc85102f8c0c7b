package cluster

import (
	"errors"
	"net"
	"os"
	"path/filepath"
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
