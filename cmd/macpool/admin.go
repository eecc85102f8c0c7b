package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/macpool/macpool/client"
	"github.com/macpool/macpool/cluster"
)

// adminFlags are the flags of the commands that call a coordinator's admin
// endpoints (macpool keys, macpool drain, macpool models).
type adminFlags struct {
	coordinator string
	key         string
	secretFile  string
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	coordinatorFlag(fs, &f.coordinator)
	fs.StringVar(&f.key, "admin-key", "", "admin API key (default $MACPOOL_ADMIN_KEY, else $MACPOOL_API_KEY, else the admin token of the cluster secret file); not needed while the cluster is open (no keys, no secret)")
	fs.StringVar(&f.secretFile, "secret-file", "", `cluster secret whose admin token is sent when no admin key is given (default: $MACPOOL_SECRET_FILE, else the default file if it exists; "none": never)`)
}

// coordinatorFlag registers -coordinator, the one way every client command
// (status, top, keys, models, drain) names a coordinator: host:port or a
// URL, default $MACPOOL_COORDINATOR, else 127.0.0.1:8080.
func coordinatorFlag(fs *flag.FlagSet, p *string) {
	def := os.Getenv("MACPOOL_COORDINATOR")
	if def == "" {
		def = "127.0.0.1:8080"
	}
	fs.StringVar(p, "coordinator", def, "HTTP address (host:port or URL) of any coordinator (default $MACPOOL_COORDINATOR, else 127.0.0.1:8080)")
}

// credential is the bearer token of admin calls: -admin-key, the
// environment, else the admin token derived from the cluster secret.
func (f *adminFlags) credential() (string, error) {
	key := f.key
	for _, env := range []string{"MACPOOL_ADMIN_KEY", "MACPOOL_API_KEY"} {
		if key == "" {
			key = os.Getenv(env)
		}
	}
	if key != "" {
		return key, nil
	}
	s, _, err := cluster.FindSecret(f.secretFile, os.Getenv)
	if err != nil || s == nil {
		return "", err
	}
	return s.AdminToken(), nil
}

// client is the admin client of -coordinator, with the credential.
func (f *adminFlags) client() (*client.Client, error) {
	key, err := f.credential()
	if err != nil {
		return nil, err
	}
	c, err := client.New(f.coordinator, key, nil)
	return c, usageErr(err)
}

// usageErr marks a bad address or model source as a usage error.
func usageErr(err error) error {
	if errors.Is(err, client.ErrAddress) || errors.Is(err, client.ErrSource) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}

// splitVerb separates a leading positional argument (a verb or a node
// name) from the flags that follow it; flags may also come first.
func splitVerb(fs *flag.FlagSet, args []string) (string, error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], parseFlags(fs, args[1:])
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return "", err
		}
		return "", fmt.Errorf("%w: %v", errUsage, err)
	}
	switch fs.NArg() {
	case 0:
		return "", nil
	case 1:
		return fs.Arg(0), nil
	}
	return "", fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(1))
}

// requestTimeout bounds one admin call.
const requestTimeout = 30 * time.Second

// printUsage prints a client subcommand's usage text and the flags every
// subcommand of it takes (adminFlags).
func printUsage(w io.Writer, usage string) {
	fmt.Fprintln(w, usage)
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(w)
	var af adminFlags
	af.register(fs)
	fs.PrintDefaults()
}
