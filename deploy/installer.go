package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Runner runs a service-manager command (launchctl, systemctl) and returns
// its combined output; the installer's only way to touch the system besides
// writing the definition file. Tests use a fake.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run runs name with args; a non-zero exit is an error carrying the output.
func (ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Installer installs, removes and inspects one service.
type Installer struct {
	cfg        Config
	run        Runner
	retryDelay time.Duration // between launchctl bootstrap attempts
}

const bootstrapAttempts = 3

// New returns an Installer for cfg that runs commands with run.
func New(cfg Config, run Runner) (*Installer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if run == nil {
		return nil, errors.New("service runner must be set")
	}
	return &Installer{cfg: cfg, run: run, retryDelay: time.Second}, nil
}

// Status is what the service manager says about the service.
type Status struct {
	Path      string // the definition file
	Installed bool   // the definition file exists
	Loaded    bool   // the service manager knows the service
	Running   bool
	PID       int    // 0 when not running
	State     string // launchd "state", systemd "ActiveState/SubState"
	LastExit  string // last exit status, if the manager reports one
	Logs      string // how to follow the log
}

func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "definition: %s", s.Path)
	if !s.Installed {
		b.WriteString(" (missing)")
	}
	fmt.Fprintf(&b, "\nloaded:     %v\nrunning:    %v", s.Loaded, s.Running)
	if s.PID > 0 {
		fmt.Fprintf(&b, " (pid %d)", s.PID)
	}
	if s.State != "" {
		fmt.Fprintf(&b, "\nstate:      %s", s.State)
	}
	if s.LastExit != "" {
		fmt.Fprintf(&b, "\nlast exit:  %s", s.LastExit)
	}
	fmt.Fprintf(&b, "\nlogs:       %s\n", s.Logs)
	return b.String()
}

// Install writes the service definition and (re)starts the service. An
// installed service is replaced.
func (i *Installer) Install(ctx context.Context) error {
	data, err := Render(i.cfg)
	if err != nil {
		return err
	}
	if i.cfg.OS == "darwin" {
		if err := os.MkdirAll(filepath.Dir(i.cfg.LogFile()), 0o755); err != nil {
			return err
		}
	}
	secrets, err := RenderEnvFile(i.cfg) // secrets.go: nil on macOS or without secrets
	if err != nil {
		return err
	}
	if secrets != nil {
		if err := writeFile(i.cfg.EnvFile(), secrets, 0o600); err != nil {
			if errors.Is(err, os.ErrPermission) && i.cfg.System {
				return fmt.Errorf("%w (system units need root: run with sudo)", err)
			}
			return err
		}
	} else if f := i.cfg.EnvFile(); f != "" {
		if err := removeIfExists(f); err != nil { // secrets of an earlier install
			return err
		}
	}
	if err := writeFile(i.cfg.Path(), data, i.fileMode()); err != nil {
		if errors.Is(err, os.ErrPermission) && i.cfg.System {
			return fmt.Errorf("%w (system units need root: run with sudo)", err)
		}
		return err
	}
	if i.cfg.OS == "darwin" {
		if _, err := i.run.Run(ctx, "launchctl", "print", i.target()); err == nil {
			if _, err := i.run.Run(ctx, "launchctl", "bootout", i.target()); err != nil {
				return err
			}
		}
		if _, err := i.run.Run(ctx, "launchctl", "enable", i.target()); err != nil {
			return err
		}
		// Right after a bootout the old job may still be exiting and
		// bootstrap fails ("5: Input/output error"): retry a few times.
		var err error
		for attempt := 0; attempt < bootstrapAttempts; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(i.retryDelay):
				}
			}
			if _, err = i.run.Run(ctx, "launchctl", "bootstrap", i.domain(), i.cfg.Path()); err == nil {
				return nil
			}
		}
		return err
	}
	for _, args := range [][]string{{"daemon-reload"}, {"enable", i.cfg.UnitName()}, {"restart", i.cfg.UnitName()}} {
		if _, err := i.systemctl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// Uninstall stops the service and removes its definition; logs are kept.
func (i *Installer) Uninstall(ctx context.Context) error {
	path := i.cfg.Path()
	_, statErr := os.Stat(path)
	installed := statErr == nil
	if i.cfg.OS == "darwin" {
		_, err := i.run.Run(ctx, "launchctl", "print", i.target())
		loaded := err == nil
		if !loaded && !installed {
			return fmt.Errorf("service %s: %w", i.cfg.Label(), ErrNotInstalled)
		}
		if loaded {
			if _, err := i.run.Run(ctx, "launchctl", "bootout", i.target()); err != nil {
				return err
			}
		}
		return removeIfExists(path)
	}
	if !installed {
		return fmt.Errorf("service %s (%s): %w", i.cfg.UnitName(), path, ErrNotInstalled)
	}
	if _, err := i.systemctl(ctx, "disable", "--now", i.cfg.UnitName()); err != nil {
		return err
	}
	if err := removeIfExists(path); err != nil {
		return err
	}
	if err := removeIfExists(i.cfg.EnvFile()); err != nil {
		return err
	}
	_, err := i.systemctl(ctx, "daemon-reload")
	return err
}

// Status asks the service manager about the service. A service that is
// neither installed nor loaded gives ErrNotInstalled with the Status.
func (i *Installer) Status(ctx context.Context) (Status, error) {
	s := Status{Path: i.cfg.Path(), Logs: i.cfg.LogHint()}
	_, err := os.Stat(s.Path)
	s.Installed = err == nil
	if i.cfg.OS == "darwin" {
		out, err := i.run.Run(ctx, "launchctl", "print", i.target())
		if err == nil {
			s.Loaded = true
			kv := parseLaunchctlPrint(out)
			s.State = kv["state"]
			s.Running = s.State == "running"
			s.PID, _ = strconv.Atoi(kv["pid"])
			s.LastExit = kv["last exit code"]
		}
	} else {
		out, err := i.systemctl(ctx, "show", i.cfg.UnitName(), "--no-pager",
			"--property=LoadState,ActiveState,SubState,MainPID,ExecMainStatus")
		if err != nil {
			return s, err
		}
		kv := parseKeyValues(out, "=")
		s.Loaded = kv["LoadState"] == "loaded"
		s.State = kv["ActiveState"] + "/" + kv["SubState"]
		s.Running = kv["ActiveState"] == "active" && kv["SubState"] == "running"
		s.PID, _ = strconv.Atoi(kv["MainPID"])
		if kv["ExecMainStatus"] != "" && kv["ExecMainStatus"] != "0" {
			s.LastExit = kv["ExecMainStatus"]
		}
	}
	if !s.Installed && !s.Loaded {
		return s, fmt.Errorf("service %s: %w", i.cfg.Role, ErrNotInstalled)
	}
	return s, nil
}

func (i *Installer) domain() string { return "gui/" + strconv.Itoa(i.cfg.UID) }
func (i *Installer) target() string { return i.domain() + "/" + i.cfg.Label() }

func (i *Installer) systemctl(ctx context.Context, args ...string) ([]byte, error) {
	if !i.cfg.System {
		args = append([]string{"--user"}, args...)
	}
	return i.run.Run(ctx, "systemctl", args...)
}

// fileMode keeps definitions that carry secrets readable by their owner
// only: a plist with secret arguments or environment (secrets.go). A
// systemd unit carries none (they are in its EnvFile) and stays 0644.
func (i *Installer) fileMode() os.FileMode {
	if i.cfg.OS == "darwin" && i.cfg.carriesSecrets() {
		return 0o600
	}
	return 0o644
}

// parseLaunchctlPrint reads the top-level "key = value" lines of
// `launchctl print` (nested blocks are indented further and skipped).
func parseLaunchctlPrint(out []byte) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "\t\t") {
			continue
		}
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " = "); ok {
			if _, dup := kv[k]; !dup {
				kv[k] = v
			}
		}
	}
	return kv
}

func parseKeyValues(out []byte, sep string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), sep); ok {
			kv[k] = v
		}
	}
	return kv
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".macpool-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
