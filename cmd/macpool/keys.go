package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/macpool/macpool/coordinator"
)

func init() {
	register("keys", "manage API keys: keys create [-id ID] [-admin] | keys list | keys revoke ID", runKeys)
}

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: macpool keys create [-id ID] [-name NAME] [-admin] | list | revoke ID  [-coordinator ADDR] [-admin-key KEY]")
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
		var req coordinator.KeyRequest
		fs.StringVar(&req.ID, "id", "", "key id (default: key-<random>); shown in logs and used for fairness")
		fs.StringVar(&req.Name, "name", "", "description")
		fs.BoolVar(&req.Admin, "admin", false, "may manage keys and drain nodes (the first key of a cluster must be one)")
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		var k coordinator.CreatedKey
		if err := af.call(ctx, "POST", coordinator.AdminPath+"keys", req, &k); err != nil {
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
		var list struct {
			Data []coordinator.KeyInfo `json:"data"`
		}
		if err := af.call(ctx, "GET", coordinator.AdminPath+"keys", nil, &list); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tADMIN\tCREATED\tLAST USED")
		for _, k := range list.Data {
			fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", k.ID, k.Name, k.Admin, unixTime(k.Created), unixTime(k.LastUsed))
		}
		return tw.Flush()
	case "revoke":
		id, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("%w: keys revoke needs the key id", errUsage)
		}
		if err := af.call(ctx, "DELETE", coordinator.AdminPath+"keys/"+url.PathEscape(id), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked key %s\n", id)
		return nil
	}
	return fmt.Errorf("%w: unknown keys subcommand %q (create, list, revoke)", errUsage, verb)
}

func unixTime(s int64) string {
	if s == 0 {
		return "-"
	}
	return time.Unix(s, 0).UTC().Format("2006-01-02 15:04 UTC")
}
