package cluster

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The cluster secret (docs/security.md) is 32 random bytes made once by
// `macpool init` and copied to every machine of the cluster. Everything a
// node needs to prove membership and to encrypt cluster traffic is derived
// from it with HKDF-SHA256, each key under its own label, so no other key
// material has to be distributed:
//   - the memberlist keyring key (AES-256-GCM gossip encryption),
//   - the NATS user and password (clients and routes),
//   - the cluster CA: an Ed25519 key whose seed is derived, and a
//     self-signed certificate with fixed fields, so every node computes the
//     same CA byte for byte. Each node signs its own short-lived leaf
//     certificate with it at start (NodeTLS); NATS (clients and routes) and
//     Raft use mutual TLS against that CA with the fixed server name
//     TLSServerName, so addresses need not be known in advance.
//
// A changed label or derivation is a protocol change: bump its version
// suffix, and nodes of different versions will not talk to each other.

// SecretSize is the length of the cluster secret in bytes.
const SecretSize = 32

// TLSServerName is the DNS name in every node certificate; clients verify
// servers by it (not by IP), against the cluster CA.
const TLSServerName = "node.macpool.internal"

// NATSUser is the NATS user name of cluster nodes; the password is derived.
const NATSUser = "macpool"

// secretHeader starts the secret file; the key follows as standard base64
// on its own line. Lines starting with '#' are comments.
const secretHeader = "# macpool cluster secret v1: copy this file (mode 0600) to every machine of the cluster; anyone who has it can join and read cluster traffic"

// ErrSecretExists is returned by WriteSecret when the file exists and
// overwriting was not asked for.
var ErrSecretExists = errors.New("cluster secret file already exists")

// Secret is a cluster secret and the keys derived from it. The zero value
// is not usable; make one with NewSecret, ParseSecret or LoadSecret.
type Secret struct {
	key [SecretSize]byte

	caOnce sync.Once
	ca     *x509.Certificate
	caKey  ed25519.PrivateKey
	caPool *x509.CertPool
	caErr  error
}

// NewSecret makes a new random secret.
func NewSecret() (*Secret, error) {
	s := &Secret{}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, fmt.Errorf("cluster secret: random: %w", err)
	}
	return s, nil
}

// SecretFromBytes makes a secret from exactly SecretSize bytes (tests).
func SecretFromBytes(b []byte) (*Secret, error) {
	if len(b) != SecretSize {
		return nil, fmt.Errorf("cluster secret: got %d bytes, want %d", len(b), SecretSize)
	}
	s := &Secret{}
	copy(s.key[:], b)
	return s, nil
}

// ParseSecret reads the secret file format written by Encode: comment lines
// starting with '#', and one line with the base64 key.
func ParseSecret(data []byte) (*Secret, error) {
	var line string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if line != "" {
			return nil, errors.New("cluster secret: more than one key line")
		}
		line = l
	}
	if line == "" {
		return nil, errors.New("cluster secret: no key line (want base64 of 32 bytes; make one with macpool init)")
	}
	b, err := base64.StdEncoding.DecodeString(line)
	if err != nil {
		return nil, fmt.Errorf("cluster secret: key line is not base64: %w", err)
	}
	if len(b) != SecretSize {
		return nil, fmt.Errorf("cluster secret: key has %d bytes, want %d", len(b), SecretSize)
	}
	return SecretFromBytes(b)
}

// Encode returns the secret file contents.
func (s *Secret) Encode() []byte {
	return []byte(secretHeader + "\n" + base64.StdEncoding.EncodeToString(s.key[:]) + "\n")
}

// Equal reports whether two secrets are the same key (nil equals nil).
func (s *Secret) Equal(o *Secret) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.key == o.key
}

// LoadSecret reads a secret file. Like ssh with private keys, it refuses a
// file that other users may read or write (on Unix).
func LoadSecret(path string) (*Secret, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster secret %s: not a regular file", path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster secret %s: permissions %#o let other users read it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster secret %s: %w", path, err)
	}
	s, err := ParseSecret(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// WriteSecret writes s to path with mode 0600, creating the parent folder
// (0700) if needed. An existing file is replaced only if overwrite is set
// (else ErrSecretExists); the write goes through a temporary file and a
// rename, so a reader never sees half a key.
func WriteSecret(path string, s *Secret, overwrite bool) error {
	if _, err := os.Lstat(path); err == nil && !overwrite {
		return fmt.Errorf("%s: %w", path, ErrSecretExists)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster secret folder %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".cluster-secret-*")
	if err != nil {
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	if _, err := f.Write(s.Encode()); err != nil {
		f.Close()
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	if !overwrite {
		// Link fails if path appeared meanwhile; rename would replace it.
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", path, ErrSecretExists)
			}
			return fmt.Errorf("cluster secret %s: %w", path, err)
		}
		return nil
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cluster secret %s: %w", path, err)
	}
	return nil
}

// derive returns n bytes for purpose label.
func (s *Secret) derive(label string, n int) []byte {
	b, err := hkdf.Key(sha256.New, s.key[:], nil, "macpool "+label, n)
	if err != nil {
		panic(fmt.Sprintf("hkdf %s: %v", label, err)) // only for n > 255*32: a programming error
	}
	return b
}

// ID is a short public fingerprint of the secret (safe to log): nodes
// that print the same ID hold the same secret.
func (s *Secret) ID() string { return hex.EncodeToString(s.derive("id v1", 6)) }

// GossipKey is the memberlist keyring key (32 bytes: AES-256-GCM).
func (s *Secret) GossipKey() []byte { return s.derive("gossip v1", 32) }

// NATSPassword is the password of NATSUser on the embedded NATS servers
// (client connections and routes).
func (s *Secret) NATSPassword() string {
	return base64.RawURLEncoding.EncodeToString(s.derive("nats password v1", 32))
}

// CA returns the cluster CA certificate (the same on every node holding
// this secret) and a pool containing only it.
func (s *Secret) CA() (*x509.Certificate, *x509.CertPool, error) {
	s.caOnce.Do(func() {
		s.caKey = ed25519.NewKeyFromSeed(s.derive("ca v1", ed25519.SeedSize))
		// Every field fixed: Ed25519 signatures are deterministic, so the
		// certificate is identical on every node.
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{Organization: []string{"macpool"}, CommonName: "macpool cluster CA " + s.ID()},
			NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
			NotAfter:              time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLenZero:        true,
		}
		pub := s.caKey.Public().(ed25519.PublicKey)
		der, err := x509.CreateCertificate(zeroReader{}, tmpl, tmpl, pub, s.caKey)
		if err != nil {
			s.caErr = fmt.Errorf("cluster ca: %w", err)
			return
		}
		if s.ca, err = x509.ParseCertificate(der); err != nil {
			s.caErr = fmt.Errorf("cluster ca: %w", err)
			return
		}
		s.caPool = x509.NewCertPool()
		s.caPool.AddCert(s.ca)
	})
	return s.ca, s.caPool, s.caErr
}

// zeroReader feeds x509.CreateCertificate, which with an Ed25519 key and a
// given serial number needs no randomness; a fixed stream keeps it so.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// NodeTLS makes a fresh key and a certificate for node name signed by the
// cluster CA, and returns a mutual-TLS configuration usable on both ends of
// a connection: as a server it requires a client certificate from the
// cluster CA; as a client it verifies the server against the CA and
// TLSServerName and presents its own certificate. TLS 1.3 only.
func (s *Secret) NodeTLS(name string) (*tls.Config, error) {
	ca, pool, err := s.CA()
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("node tls key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("node tls serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"macpool"}, CommonName: name},
		DNSNames:     []string{TLSServerName},
		NotBefore:    now.Add(-time.Hour), // clock skew between Macs
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, s.caKey)
	if err != nil {
		return nil, fmt.Errorf("node tls certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   TLSServerName,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}, nil
}

// DiscoveryToken is the string given to LAN discovery as its cluster
// secret (only a hash of it is advertised), so that workers without -join
// find only coordinators of their own cluster.
func (s *Secret) DiscoveryToken() string {
	return base64.RawURLEncoding.EncodeToString(s.derive("discovery v1", 32))
}

// AdminToken is the bearer token for the coordinators' admin endpoints
// (keys, drain; coordinator.Config.AdminToken) that every holder of the
// secret can compute: the CLI on any machine of the cluster administers it
// without a stored admin key. Hex; it crosses the HTTP API like API keys
// (docs/security.md), and reveals neither the secret nor the other keys.
func (s *Secret) AdminToken() string { return hex.EncodeToString(s.derive("admin token v1", 32)) }

// ModelStoreKey is the key of the model store's request tokens
// (modelstore.ServerConfig.Secret): a derived key, so that a token seen on
// the wire says nothing about the secret itself.
func (s *Secret) ModelStoreKey() []byte { return s.derive("model store v1", 32) }
