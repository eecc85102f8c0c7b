package main

import (
	"context"
	"fmt"
	"io"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/client"
)

func init() {
	register("keys", "manage API keys: keys create [-id ID] [-admin] | keys list | keys revoke ID", runKeys)
}

const keysUsage = `usage: macpool keys create [-id ID] [-name NAME] [-admin]
       macpool keys list
       macpool keys revoke ID

create stores a new API key in the cluster state (only its hash) and prints
its secret once; clients send it as their OpenAI key. An -admin key may also
manage keys, drain nodes and change the model registry; the first key of a
cluster must be one. list shows the keys (never their secrets) with their last
use; revoke deletes one at once, cluster-wide.

Flags of every keys subcommand:`

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		printUsage(stderr, keysUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: a subcommand is required (create, list, revoke)", errUsage)
		}
		return nil
	}
	verb, rest := args[0], args[1:]
	fs := newFlagSet("keys "+verb, stderr)
	var af adminFlags
	af.register(fs)
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	switch verb {
	case "create":
		var req admin.KeyRequest
		fs.StringVar(&req.ID, "id", "", "key id (default: key-<random>); shown in logs and used for fairness")
		fs.StringVar(&req.Name, "name", "", "description")
		fs.BoolVar(&req.Admin, "admin", false, "may manage keys and drain nodes (the first key of a cluster must be one)")
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		k, err := c.CreateKey(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created key %s (admin: %v)\n", k.ID, k.Admin)
		fmt.Fprintf(stdout, "secret: %s\n", k.Secret)
		fmt.Fprintln(stderr, "the secret is shown only now: the cluster keeps only its hash")
		return nil
	case "list":
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		keys, err := c.Keys(ctx)
		if err != nil {
			return err
		}
		return client.PrintKeys(stdout, keys)
	case "revoke":
		id, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("%w: keys revoke needs the key id", errUsage)
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		if err := c.RevokeKey(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked key %s\n", id)
		return nil
	}
	return fmt.Errorf("%w: unknown keys subcommand %q (create, list, revoke)", errUsage, verb)
}
