package main

import (
	"context"
	"fmt"
	"io"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/client"
)

func init() {
	register("models", "manage the model registry: models add REF|PATH [-wait] | models rm NAME | models ls", runModels)
}

const modelsUsage = `usage: macpool models add REF|PATH [-name NAME] [-node WORKER] [-replicas N] [-size BYTES] [-wait] [-coordinator ADDR] [-admin-key KEY]
       macpool models rm NAME
       macpool models ls [-json]

add registers a model: a Hugging Face reference (ORG/NAME[@REV][:FILE|QUANT]) is
downloaded once, by one worker, and the others pull it from their peers; a
local PATH is served in place by the worker named by -node (default: every
worker that has the path) and pulled from it by the others. Placement puts
the model on the workers whose memory fits it (-replicas N: at most N).

Flags of every models subcommand:`

func runModels(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		printUsage(stderr, modelsUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: a subcommand is required (add, rm, ls)", errUsage)
		}
		return nil
	}
	verb, rest := args[0], args[1:]
	fs := newFlagSet("models "+verb, stderr)
	var af adminFlags
	af.register(fs)
	switch verb {
	case "add":
		var req admin.AddModelRequest
		fs.StringVar(&req.Name, "name", "", "name clients use (default: the reference, or the folder's base name)")
		fs.StringVar(&req.SourceNode, "node", "", "worker that has a local PATH (default: any worker where the path exists)")
		fs.IntVar(&req.Replicas, "replicas", 0, "place on at most N workers (0: every worker with room)")
		fs.Int64Var(&req.Size, "size", 0, "model size in bytes for placement (default: measured for a local path; else reported by the first worker that has it)")
		wait := fs.Bool("wait", false, "show progress until every placed worker serves the model")
		timeout := fs.Duration("timeout", 0, "with -wait: give up after this long (0: never)")
		src, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if src == "" {
			return fmt.Errorf("%w: models add needs a Hugging Face reference or a local path", errUsage)
		}
		if err := client.ModelSource(&req, src); err != nil {
			return usageErr(err)
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, requestTimeout)
		spec, err := c.AddModel(actx, req)
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "added model %s (source %s)\n", spec.Name, spec.Source)
		if !*wait {
			return nil
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		return c.WaitModel(ctx, spec.Name, stdout)
	case "rm", "remove":
		name, err := splitVerb(fs, rest)
		if err != nil {
			return err
		}
		if name == "" {
			return fmt.Errorf("%w: models rm needs the model name", errUsage)
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		if err := c.RemoveModel(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed model %s\n", name)
		return nil
	case "ls", "list":
		asJSON := fs.Bool("json", false, "print the raw JSON")
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		c, err := af.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		list, raw, err := c.Models(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err := stdout.Write(raw)
			return err
		}
		return client.PrintModels(stdout, list)
	}
	return fmt.Errorf("%w: unknown models subcommand %q (add, rm, ls)", errUsage, verb)
}
