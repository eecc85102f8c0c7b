package cluster

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestDefaultSecretPathAndExposedAddrs(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got, _ := DefaultSecretPath(env(map[string]string{"MACPOOL_HOME": "/m", "HOME": "/h"})); got != filepath.Join("/m", "cluster.secret") {
		t.Errorf("with MACPOOL_HOME: got %q, want /m/cluster.secret", got)
	}
	if got, _ := DefaultSecretPath(env(map[string]string{"HOME": "/h"})); got != filepath.Join("/h", ".config", "macpool", "cluster.secret") {
		t.Errorf("with HOME: got %q, want /h/.config/macpool/cluster.secret", got)
	}
	if _, err := DefaultSecretPath(env(nil)); err == nil {
		t.Error("no MACPOOL_HOME and no HOME: got no error")
	}
	if s, p, err := FindSecret(SecretFileNone, env(map[string]string{"HOME": t.TempDir()})); s != nil || p != "" || err != nil {
		t.Errorf("FindSecret(none) = %v, %q, %v; want no secret", s, p, err)
	}
	got := ExposedAddrs("127.0.0.1:7946", "", "localhost:4222", "[::1]:1", "0.0.0.0:7946", "10.0.0.2:8080")
	if want := []string{"0.0.0.0:7946", "10.0.0.2:8080"}; !slices.Equal(got, want) {
		t.Errorf("ExposedAddrs = %v, want %v", got, want)
	}
}
