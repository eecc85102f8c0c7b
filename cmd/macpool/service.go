package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/macpool/macpool/deploy"
)

func init() {
	register("service", "install, uninstall or inspect macpool as a launchd agent (macOS) or systemd unit (Linux)", runService)
}

const serviceUsage = `usage:
  macpool service install [flags] -- ROLE [ROLE FLAGS]   ROLE: up, coordinator or worker
  macpool service uninstall [flags] ROLE
  macpool service status [flags] [ROLE...]

Run the command in the foreground first: a service with a bad flag restarts
every few seconds. See deploy/README.md.`

// serviceFlags are shared by the service subcommands.
type serviceFlags struct {
	system  bool
	user    string
	env     envFlag
	passEnv string
	dryRun  bool
}

// envFlag collects repeated -env NAME=VALUE flags.
type envFlag []deploy.EnvVar

func (e *envFlag) String() string { return fmt.Sprint(*e) }
func (e *envFlag) Set(v string) error {
	ev, err := deploy.ParseEnvVar(v)
	if err != nil {
		return err
	}
	*e = append(*e, ev)
	return nil
}

func (f *serviceFlags) register(fs *flag.FlagSet, install bool) {
	fs.BoolVar(&f.system, "system", false, "linux: a system unit in /etc/systemd/system (needs root) instead of a user unit")
	if install {
		fs.StringVar(&f.user, "user", "", "linux system unit: the account the service runs as (default root)")
		fs.Var(&f.env, "env", "NAME=VALUE set in the service's environment (repeatable); secrets make the file owner-only")
		fs.StringVar(&f.passEnv, "pass-env", "HF_HOME,HF_HUB_CACHE,HF_ENDPOINT,HF_HUB_OFFLINE,MACPOOL_MODEL_CACHE",
			"comma-separated variables copied from this environment when set (HF_TOKEN is not: use -env or `hf auth login`)")
		fs.BoolVar(&f.dryRun, "dry-run", false, "print the service definition instead of installing it")
	}
}

func runService(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, serviceUsage)
		if len(args) == 0 {
			return fmt.Errorf("%w: missing subcommand", errUsage)
		}
		return flag.ErrHelp
	}
	sub, args := args[0], args[1:]
	var f serviceFlags
	fs := newFlagSet("service "+sub, stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, serviceUsage)
		fs.PrintDefaults()
	}
	switch sub {
	case "install":
		f.register(fs, true)
		flagArgs, roleArgs, found := cutArgs(args, "--")
		if err := parseFlags(fs, flagArgs); err != nil {
			return err
		}
		if !found || len(roleArgs) == 0 {
			return fmt.Errorf("%w: give the command after --, e.g. macpool service install -- up -model Qwen/Qwen3-0.6B", errUsage)
		}
		cfg, err := serviceConfig(&f, roleArgs[0], roleArgs[1:])
		if err != nil {
			return err
		}
		if f.dryRun {
			b, err := deploy.Render(cfg)
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			fmt.Fprintf(stdout, "# %s\n%s", cfg.Path(), b)
			return nil
		}
		inst, err := deploy.New(cfg, deploy.ExecRunner{})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if err := inst.Install(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "installed %s\nlogs: %s\n", cfg.Path(), cfg.LogHint())
		if cfg.OS == "linux" && !cfg.System {
			fmt.Fprintln(stdout, "note: user services stop at logout unless lingering is on: loginctl enable-linger $USER")
		}
		return nil
	case "uninstall", "status":
		f.register(fs, false)
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		roles := fs.Args()
		if sub == "uninstall" && len(roles) != 1 {
			return fmt.Errorf("%w: give one role to uninstall (%s)", errUsage, strings.Join(deploy.Roles, ", "))
		}
		if len(roles) == 0 {
			roles = deploy.Roles
		}
		cfgs := make([]deploy.Config, len(roles))
		for k, role := range roles {
			var err error
			if cfgs[k], err = serviceConfig(&f, role, nil); err != nil {
				return err
			}
		}
		if sub == "status" {
			return deploy.Report(ctx, cfgs, deploy.ExecRunner{}, len(fs.Args()) == 0, stdout)
		}
		inst, err := deploy.New(cfgs[0], deploy.ExecRunner{})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if err := inst.Uninstall(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "uninstalled %s (logs kept)\n", cfgs[0].Path())
		return nil
	}
	fmt.Fprintln(stderr, serviceUsage)
	return fmt.Errorf("%w: unknown service subcommand %q", errUsage, sub)
}

// cutArgs splits args at the first sep.
func cutArgs(args []string, sep string) (before, after []string, found bool) {
	for i, a := range args {
		if a == sep {
			return args[:i], args[i+1:], true
		}
	}
	return args, nil, false
}

// serviceConfig fills a deploy.Config from the flags and this process's
// user, executable, working directory and environment.
func serviceConfig(f *serviceFlags, role string, args []string) (deploy.Config, error) {
	cfg := deploy.DefaultConfig()
	cfg.OS, cfg.Role, cfg.Args = runtime.GOOS, role, args
	cfg.System, cfg.User = f.system, f.user
	cfg.UID = os.Getuid()
	home, err := os.UserHomeDir()
	if err != nil {
		return cfg, err
	}
	cfg.HomeDir = home
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		cfg.UserUnitDir = filepath.Join(x, "systemd", "user")
	}
	exe, err := os.Executable()
	if err != nil {
		return cfg, fmt.Errorf("find the macpool binary: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return cfg, fmt.Errorf("find the macpool binary: %w", err)
	}
	cfg.Binary = exe
	if cfg.WorkingDir, err = os.Getwd(); err != nil {
		return cfg, err
	}
	cfg.AddEnv(f.env, f.passEnv, os.LookupEnv)
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %v", errUsage, err)
	}
	return cfg, nil
}
