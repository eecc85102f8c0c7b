package deploy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func darwinConfig(home string) Config {
	c := DefaultConfig()
	c.OS, c.Role, c.UID, c.HomeDir = "darwin", "up", 501, home
	c.Binary = "/usr/local/bin/macpool"
	c.Args = []string{"-model", "Qwen/Qwen3-0.6B", "-http", ":8080"}
	return c
}

func linuxConfig(home string) Config {
	c := DefaultConfig()
	c.OS, c.Role, c.UID, c.HomeDir = "linux", "worker", 1000, home
	c.Binary = "/opt/macpool/bin/macpool"
	c.Args = []string{"-join", "mac-a.local:7946", "-model", "Qwen/Qwen3-8B-GGUF:Q4_K_M"}
	return c
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		golden string
		cfg    func() Config
	}{
		{"launchd_up.plist", func() Config { return darwinConfig("/Users/ann") }},
		{"launchd_worker_env.plist", func() Config {
			c := darwinConfig("/Users/ann & bob")
			c.Role = "worker"
			c.Args = []string{"-join", "mac-a.local:7946", "-model", "/Users/ann/models/<qwen>", "-model-name", `a"b`}
			c.WorkingDir = "/Users/ann"
			c.Env = []EnvVar{{"HF_TOKEN", "hf_x"}, {"HF_HOME", "/Users/ann/.cache/hf"}}
			return c
		}},
		{"systemd_user_worker.service", func() Config { return linuxConfig("/home/ann") }},
		{"systemd_system_coordinator.service", func() Config {
			c := linuxConfig("/var/lib/macpool")
			c.Role, c.System, c.User = "coordinator", true, "macpool"
			c.Args = []string{"-nats", "nats://a:4222,nats://b:4222,nats://c:4222", "-data-dir", "/var/lib/macpool/data dir", "-api-key", "$ecret%d"}
			c.WorkingDir = "/var/lib/macpool"
			c.Env = []EnvVar{{"MACPOOL_MODEL_CACHE", "/var/cache/macpool 100%"}, {"HF_ENDPOINT", `https://mirror/"x"`}}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got, err := Render(tt.cfg())
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("rendered %s differs from the golden file (go test ./deploy -update):\n%s", tt.golden, got)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"bad role", func(c *Config) { c.Role = "api" }, `role "api" must be one of up, coordinator, worker`},
		{"relative binary", func(c *Config) { c.Binary = "macpool" }, "binary \"macpool\" must be an absolute path"},
		{"root agent", func(c *Config) { c.UID = 0 }, "not root"},
		{"system on mac", func(c *Config) { c.System = true }, "system-wide install and -user are for linux"},
		{"newline arg", func(c *Config) { c.Args = []string{"-model", "a\nb"} }, "must not contain newlines"},
		{"bad env", func(c *Config) { c.Env = []EnvVar{{"A=B", "x"}} }, "without '='"},
		{"dup env", func(c *Config) { c.Env = []EnvVar{{"A", "x"}, {"A", "y"}} }, "given twice"},
		{"bad os", func(c *Config) { c.OS = "windows" }, "must be darwin (launchd) or linux (systemd)"},
		{"user without system", func(c *Config) { c.OS, c.User = "linux", "x" }, "only be set with a system unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := darwinConfig("/Users/ann")
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// fakeRunner records commands and answers from a table keyed by the
// command line; unknown commands succeed with no output.
type fakeRunner struct {
	calls   []string
	answers map[string]fakeAnswer
}

type fakeAnswer struct {
	out   string
	err   error
	times int // >0: the answer holds this many times, then the command succeeds
}

func (f *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, line)
	a := f.answers[line]
	if a.times > 0 {
		if a.times--; a.times == 0 {
			delete(f.answers, line)
		} else {
			f.answers[line] = a
		}
	}
	return []byte(a.out), a.err
}

func checkCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var errExit = errors.New("exit status 113")

const launchctlPrint = `gui/501/com.macpool.up = {
	active count = 1
	path = /Users/ann/Library/LaunchAgents/com.macpool.up.plist
	state = running

	program = /usr/local/bin/macpool
	arguments = {
		/usr/local/bin/macpool
		up
	}
	pid = 4242
	last exit code = (never exited)
}
`

func TestLaunchdInstallUninstallStatus(t *testing.T) {
	home := t.TempDir()
	cfg := darwinConfig(home)
	plist := filepath.Join(home, "Library", "LaunchAgents", "com.macpool.up.plist")
	notLoaded := fakeAnswer{err: errExit}
	r := &fakeRunner{answers: map[string]fakeAnswer{"launchctl print gui/501/com.macpool.up": notLoaded}}
	inst, err := New(cfg, r)
	if err != nil {
		t.Fatal(err)
	}
	inst.retryDelay = 0
	ctx := context.Background()

	if _, err := inst.Status(ctx); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("status before install: got %v, want ErrNotInstalled", err)
	}
	if err := inst.Uninstall(ctx); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("uninstall before install: got %v, want ErrNotInstalled", err)
	}
	r.calls = nil

	// Fresh install: not loaded yet, so no bootout.
	if err := inst.Install(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r.calls,
		"launchctl print gui/501/com.macpool.up",
		"launchctl enable gui/501/com.macpool.up",
		"launchctl bootstrap gui/501 "+plist)
	want, _ := RenderPlist(cfg)
	if got, err := os.ReadFile(plist); err != nil || string(got) != string(want) {
		t.Fatalf("plist on disk: %v, differs from the rendered one", err)
	}
	if st, err := os.Stat(filepath.Join(home, "Library", "Logs", "macpool")); err != nil || !st.IsDir() {
		t.Fatalf("log folder not created: %v", err)
	}

	// Reinstall while loaded: the old agent is booted out first.
	r.answers["launchctl print gui/501/com.macpool.up"] = fakeAnswer{out: launchctlPrint}
	r.calls = nil
	if err := inst.Install(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r.calls,
		"launchctl print gui/501/com.macpool.up",
		"launchctl bootout gui/501/com.macpool.up",
		"launchctl enable gui/501/com.macpool.up",
		"launchctl bootstrap gui/501 "+plist)

	st, err := inst.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed || !st.Loaded || !st.Running || st.PID != 4242 || st.State != "running" || st.LastExit != "(never exited)" {
		t.Fatalf("status: got %+v", st)
	}
	if !strings.Contains(st.String(), "tail -f "+filepath.Join(home, "Library", "Logs", "macpool", "up.log")) {
		t.Errorf("status text lacks the log hint:\n%s", st)
	}

	r.calls = nil
	if err := inst.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r.calls,
		"launchctl print gui/501/com.macpool.up",
		"launchctl bootout gui/501/com.macpool.up")
	if _, err := os.Stat(plist); !os.IsNotExist(err) {
		t.Fatalf("plist still there after uninstall: %v", err)
	}

	// A bootstrap that fails while the old job exits is retried...
	bootstrap := "launchctl bootstrap gui/501 " + plist
	ioErr := fmt.Errorf("Bootstrap failed: 5: Input/output error")
	r.answers["launchctl print gui/501/com.macpool.up"] = notLoaded
	r.answers[bootstrap] = fakeAnswer{err: ioErr, times: 1}
	r.calls = nil
	if err := inst.Install(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, r.calls,
		"launchctl print gui/501/com.macpool.up",
		"launchctl enable gui/501/com.macpool.up",
		bootstrap, bootstrap)
	// ...and reported when it keeps failing.
	r.answers[bootstrap] = fakeAnswer{err: ioErr}
	if err := inst.Install(ctx); err == nil || !strings.Contains(err.Error(), "Bootstrap failed") {
		t.Fatalf("got %v, want the bootstrap error", err)
	}
}

func TestSystemdInstallUninstallStatus(t *testing.T) {
	for _, system := range []bool{false, true} {
		t.Run(fmt.Sprintf("system=%v", system), func(t *testing.T) {
			home := t.TempDir()
			cfg := linuxConfig(home)
			cfg.System = system
			cfg.SystemUnitDir = filepath.Join(home, "etc", "systemd", "system")
			unit := filepath.Join(home, ".config", "systemd", "user", "macpool-worker.service")
			sc := "systemctl --user "
			if system {
				unit = filepath.Join(cfg.SystemUnitDir, "macpool-worker.service")
				sc = "systemctl "
			}
			show := sc + "show macpool-worker.service --no-pager --property=LoadState,ActiveState,SubState,MainPID,ExecMainStatus"
			r := &fakeRunner{answers: map[string]fakeAnswer{
				show: {out: "LoadState=not-found\nActiveState=inactive\nSubState=dead\nMainPID=0\nExecMainStatus=0\n"},
			}}
			inst, err := New(cfg, r)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := inst.Status(ctx); !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("status before install: got %v, want ErrNotInstalled", err)
			}
			if err := inst.Uninstall(ctx); !errors.Is(err, ErrNotInstalled) {
				t.Fatalf("uninstall before install: got %v, want ErrNotInstalled", err)
			}
			r.calls = nil

			if err := inst.Install(ctx); err != nil {
				t.Fatal(err)
			}
			checkCalls(t, r.calls,
				sc+"daemon-reload",
				sc+"enable macpool-worker.service",
				sc+"restart macpool-worker.service")
			want, _ := RenderUnit(cfg)
			if got, err := os.ReadFile(unit); err != nil || string(got) != string(want) {
				t.Fatalf("unit on disk: %v, differs from the rendered one", err)
			}

			r.answers[show] = fakeAnswer{out: "LoadState=loaded\nActiveState=active\nSubState=running\nMainPID=777\nExecMainStatus=0\n"}
			r.calls = nil
			st, err := inst.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			checkCalls(t, r.calls, show)
			if !st.Installed || !st.Loaded || !st.Running || st.PID != 777 || st.State != "active/running" {
				t.Fatalf("status: got %+v", st)
			}
			if want := "journalctl " + strings.TrimPrefix(sc, "systemctl ") + "-u macpool-worker.service -f"; st.Logs != want {
				t.Errorf("log hint %q, want %q", st.Logs, want)
			}

			r.calls = nil
			if err := inst.Uninstall(ctx); err != nil {
				t.Fatal(err)
			}
			checkCalls(t, r.calls,
				sc+"disable --now macpool-worker.service",
				sc+"daemon-reload")
			if _, err := os.Stat(unit); !os.IsNotExist(err) {
				t.Fatalf("unit still there after uninstall: %v", err)
			}
		})
	}
}

func TestSecretsMakeThePlistPrivate(t *testing.T) {
	home := t.TempDir()
	cfg := darwinConfig(home)
	cfg.Env = []EnvVar{{"HF_TOKEN", "hf_secret"}}
	r := &fakeRunner{answers: map[string]fakeAnswer{"launchctl print gui/501/com.macpool.up": {err: errExit}}}
	inst, err := New(cfg, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cfg.Path())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("plist mode %v, %v, want 0600", st.Mode().Perm(), err)
	}
}
