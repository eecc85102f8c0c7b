package cluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func fixedSecret(t *testing.T, b byte) *Secret {
	t.Helper()
	s, err := SecretFromBytes(bytes.Repeat([]byte{b}, SecretSize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type derived struct {
	id, gossip, nats, disc, admin, store string
	ca                                   []byte
}

func deriveAll(t *testing.T, s *Secret) derived {
	t.Helper()
	ca, pool, err := s.CA()
	if err != nil {
		t.Fatal(err)
	}
	if pool == nil || !ca.IsCA {
		t.Fatalf("CA: got IsCA %v, pool %v", ca.IsCA, pool)
	}
	return derived{s.ID(), string(s.GossipKey()), s.NATSPassword(), s.DiscoveryToken(), s.AdminToken(), string(s.ModelStoreKey()), ca.Raw}
}

func TestSecretDerivationDeterministic(t *testing.T) {
	a1, a2, b := fixedSecret(t, 1), fixedSecret(t, 1), fixedSecret(t, 2)
	da1, da2, db := deriveAll(t, a1), deriveAll(t, a2), deriveAll(t, b)
	if da1.id != da2.id || da1.gossip != da2.gossip || da1.nats != da2.nats || da1.disc != da2.disc || da1.admin != da2.admin || da1.store != da2.store || !bytes.Equal(da1.ca, da2.ca) {
		t.Fatal("same secret: derived keys or CA certificate differ, want identical (every node must compute the same)")
	}
	if da1.id == db.id || da1.gossip == db.gossip || da1.nats == db.nats || da1.disc == db.disc || da1.admin == db.admin || da1.store == db.store || bytes.Equal(da1.ca, db.ca) {
		t.Fatal("different secrets: some derived key or the CA is the same, want all different")
	}
	if len(a1.GossipKey()) != 32 {
		t.Errorf("gossip key: got %d bytes, want 32 (AES-256)", len(a1.GossipKey()))
	}
	// Purposes are separated: no derived value is a prefix of another.
	vals := []string{da1.gossip, da1.nats, da1.disc, da1.admin, da1.store}
	for i := range vals {
		for j := range vals {
			if i != j && strings.Contains(vals[i], vals[j]) {
				t.Errorf("derived values %d and %d overlap", i, j)
			}
		}
	}
	// A fresh random secret differs from both.
	r, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if r.Equal(a1) || r.Equal(b) || !a1.Equal(a2) {
		t.Error("Equal: wrong answer")
	}
}

func TestSecretFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cluster.secret")
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(path, s, false); err != nil {
		t.Fatalf("WriteSecret: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode: got %#o, want 0600", fi.Mode().Perm())
	}
	got, err := LoadSecret(path)
	if err != nil {
		t.Fatalf("LoadSecret: %v", err)
	}
	if !got.Equal(s) {
		t.Fatal("loaded secret differs from the written one")
	}
	// No overwrite without asking; the old key stays.
	s2, _ := NewSecret()
	if err := WriteSecret(path, s2, false); !errors.Is(err, ErrSecretExists) {
		t.Fatalf("second WriteSecret: got %v, want ErrSecretExists", err)
	}
	if got, _ := LoadSecret(path); !got.Equal(s) {
		t.Fatal("refused overwrite changed the file")
	}
	if err := WriteSecret(path, s2, true); err != nil {
		t.Fatalf("WriteSecret overwrite: %v", err)
	}
	if got, _ := LoadSecret(path); !got.Equal(s2) {
		t.Fatal("overwrite did not replace the key")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the secret (no temporary files left)", len(ents))
	}
}

func TestSecretFileErrors(t *testing.T) {
	dir := t.TempDir()
	good := string(fixedSecret(t, 7).Encode())
	cases := []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"missing", "", 0, "no such file"},
		{"readable by others", good, 0o644, "chmod 600"},
		{"empty", "# only a comment\n", 0o600, "no key line"},
		{"not base64", "not*base64!\n", 0o600, "not base64"},
		{"short key", "AAAA\n", 0o600, "key has 3 bytes, want 32"},
		{"two keys", good + good[strings.LastIndex(good[:len(good)-1], "\n")+1:], 0o600, "more than one key line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.mode != 0 {
				if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.mode); err != nil { // umask
					t.Fatal(err)
				}
			}
			_, err := LoadSecret(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, path, tc.want)
			}
		})
	}
}

// handshake runs a TLS handshake between a client and a server config over
// loopback TCP and returns the client's and the server's error.
func handshake(t *testing.T, client, server *tls.Config) (cerr, serr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Read(make([]byte, 1)) // TLS 1.3: the client certificate is checked by now
		}
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, client)
	cerr = tc.Handshake()
	if cerr == nil {
		_, cerr = tc.Write([]byte{1})
	}
	if cerr == nil {
		// The server's verdict on our certificate arrives as an alert.
		tc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "EOF") {
			cerr = err
		}
	}
	return cerr, <-done
}

func TestNodeTLSMutual(t *testing.T) {
	a, b := fixedSecret(t, 1), fixedSecret(t, 2)
	tlsFor := func(s *Secret, name string) *tls.Config {
		c, err := s.NodeTLS(name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if cerr, serr := handshake(t, tlsFor(a, "n1"), tlsFor(fixedSecret(t, 1), "n2")); cerr != nil || serr != nil {
		t.Fatalf("same secret: client %v, server %v; want both nil", cerr, serr)
	}
	if cerr, serr := handshake(t, tlsFor(b, "n1"), tlsFor(a, "n2")); cerr == nil || serr == nil {
		t.Fatalf("other secret: client %v, server %v; want both to fail", cerr, serr)
	}
	// A client that trusts the cluster CA but has no certificate of its own.
	anon := tlsFor(a, "x")
	anon.Certificates = nil
	if _, serr := handshake(t, anon, tlsFor(a, "n2")); serr == nil {
		t.Fatal("client without a certificate: server accepted it, want a refusal")
	}
}

func TestMembershipSecret(t *testing.T) {
	member := func(name string, s *Secret, join ...string) (*Membership, error) {
		c := FastConfig()
		c.Name = name
		c.Join = join
		c.Meta = Meta{Role: RoleWorker}
		c.Secret = s
		m, err := New(c)
		if err == nil {
			t.Cleanup(func() { m.Close() })
		}
		return m, err
	}
	good := fixedSecret(t, 1)
	a, err := member("a", good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := member("b", fixedSecret(t, 1), a.Addr()); err != nil {
		t.Fatalf("same secret: join failed: %v", err)
	}
	waitFor(t, 5*time.Second, "b at a", func() bool { _, ok := a.Member("b"); return ok })
	for _, tc := range []struct {
		name string
		s    *Secret
	}{{"wrong", fixedSecret(t, 2)}, {"none", nil}} {
		if m, err := member("stranger-"+tc.name, tc.s, a.Addr()); err == nil {
			m.Close()
			t.Errorf("%s secret: join succeeded, want an error", tc.name)
		} else {
			t.Logf("%s secret: %v", tc.name, err)
		}
	}
	// A node with the secret does not join an open cluster either.
	open, err := member("open", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := member("c", good, open.Addr()); err == nil {
		m.Close()
		t.Error("secret node joined an open cluster, want an error")
	}
	if n := len(a.Members()); n != 2 {
		t.Errorf("a sees %d members, want 2 (a, b)", n)
	}
	for _, m := range a.Members() {
		if strings.HasPrefix(m.Name, "stranger") {
			t.Errorf("a sees %s, want only a and b", m.Name)
		}
	}
	if len(open.Members()) != 1 {
		t.Errorf("open cluster has %d members, want 1", len(open.Members()))
	}
}

// FuzzParseSecret: any file content either parses into a secret that
// encodes back to an equal one, or gives an error; never a panic.
func FuzzParseSecret(f *testing.F) {
	f.Add([]byte("# c\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"))
	f.Add([]byte(""))
	f.Add([]byte("a\nb\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSecret(data)
		if err != nil {
			return
		}
		back, err := ParseSecret(s.Encode())
		if err != nil || !back.Equal(s) {
			t.Fatalf("round trip of %q: %v", data, err)
		}
	})
}
