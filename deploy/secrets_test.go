package deploy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// worldReadable walks dir and fails for any file that group or others can
// read and that contains one of the secrets.
func worldReadable(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, s := range secrets {
			if strings.Contains(string(b), s) && fi.Mode().Perm()&0o044 != 0 {
				t.Errorf("%s (mode %v) holds secret %q", p, fi.Mode().Perm(), s)
			}
		}
		return nil
	})
}

// `service install -- coordinator --api-key team:sk-…` wrote the key into a
// 0644 unit file (and a plist whose only secret is an argument as 0644 too):
// no file the installer writes may show a secret to other users.
func TestServiceSecretsNotWorldReadable(t *testing.T) {
	const key, token = "team:sk-verysecret", "hf_tokensecret"
	args := []string{"-http", ":8080", "--api-key", key, "-admin-key=" + "mp-admin", "-key-queue-limit", "8", "-secret-file", "/etc/macpool/cluster.secret",
		"-join", "mpj1.tokensecret"}
	t.Run("systemd", func(t *testing.T) {
		for _, system := range []bool{false, true} {
			home := t.TempDir()
			cfg := linuxConfig(home)
			cfg.Role, cfg.Args = "coordinator", args
			cfg.Env = []EnvVar{{"HF_TOKEN", token}, {"HF_HOME", "/cache"}}
			if system {
				cfg.System, cfg.SystemUnitDir = true, filepath.Join(home, "etc")
			}
			inst, err := New(cfg, &fakeRunner{})
			if err != nil {
				t.Fatal(err)
			}
			if err := inst.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			worldReadable(t, home, key, "mp-admin", token, "mpj1.tokensecret")
			unit, _ := os.ReadFile(cfg.Path())
			for _, want := range []string{"--api-key ${MACPOOL_SECRET_1}", "-admin-key=${MACPOOL_SECRET_2}", "-key-queue-limit 8",
				"-secret-file /etc/macpool/cluster.secret", "EnvironmentFile=" + cfg.EnvFile(), "Environment=HF_HOME=/cache"} {
				if !strings.Contains(string(unit), want) {
					t.Errorf("unit lacks %q:\n%s", want, unit)
				}
			}
			env, err := os.ReadFile(cfg.EnvFile())
			fi, _ := os.Stat(cfg.EnvFile())
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("env file: %v, want mode 0600", err)
			}
			for _, want := range []string{"MACPOOL_SECRET_1='" + key + "'", "MACPOOL_SECRET_2='mp-admin'", "HF_TOKEN='" + token + "'"} {
				if !strings.Contains(string(env), want) {
					t.Errorf("env file lacks %q:\n%s", want, env)
				}
			}
			if err := inst.Uninstall(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cfg.EnvFile()); !os.IsNotExist(err) {
				t.Errorf("env file left after uninstall: %v", err)
			}
		}
	})
	t.Run("launchd", func(t *testing.T) {
		home := t.TempDir()
		cfg := darwinConfig(home)
		cfg.Role, cfg.Args = "coordinator", args
		inst, err := New(cfg, &fakeRunner{answers: map[string]fakeAnswer{"launchctl print gui/501/com.macpool.coordinator": {err: errExit}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := inst.Install(context.Background()); err != nil {
			t.Fatal(err)
		}
		worldReadable(t, home, key, "mp-admin", "mpj1.tokensecret")
		if fi, err := os.Stat(cfg.Path()); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("plist with a secret argument: %v %v, want mode 0600", fi.Mode(), err)
		}
	})
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"--api-key": true, "-admin-key": true, "-cluster-secret": true, "HF_TOKEN": true, "OPENAI_API_KEY": true,
		"-token": true, "PASSWORD": true,
		"-key-queue-limit": false, "-key-max-streams": false, "-secret-file": false, "-model": false, "HF_HOME": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}
