package deploy

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Secrets in service definitions. A launchd plist or a systemd unit holds
// the command line and the environment of the service, and both may carry
// secrets: `service install -- coordinator --api-key team:sk-…`, HF_TOKEN.
// A plist that carries one is written 0600 (launchd reads it as its owner).
// A systemd unit is not enough to protect even at 0600: any local user can
// read a system unit's ExecStart= and Environment= over D-Bus
// (`systemctl show`). So on Linux the secret values go into an environment
// file beside the unit (EnvFile, 0600, EnvironmentFile=), and the unit
// names them as ${MACPOOL_SECRET_n}, which systemd substitutes at start.
// The secret is still in the running process's argv (ps shows it); only
// files are covered here.

// joinTokenPrefix starts a join token (cluster.JoinToken), whose value holds
// the cluster secret.
const joinTokenPrefix = "mpj1."

// secretWords mark a flag or environment variable whose value is a secret.
var secretWords = []string{"KEY", "SECRET", "TOKEN", "PASSWORD"}

// secretName reports whether an environment variable or flag name (dashes
// and case ignored) names a secret: it ends in one of secretWords, so that
// -api-key and HF_TOKEN count but -key-queue-limit and -secret-file do not.
func secretName(name string) bool {
	n := strings.ToUpper(strings.TrimLeft(name, "-"))
	n = strings.ReplaceAll(n, "-", "_")
	for _, w := range secretWords {
		if n == w || strings.HasSuffix(n, "_"+w) || strings.HasSuffix(n, w) && !strings.Contains(n, "_") {
			return true
		}
	}
	return false
}

// secretArgs returns the indices of the values in args given to secret
// flags (-name VALUE or -name=VALUE; for the latter the index of the whole
// argument).
func secretArgs(args []string) map[int]bool {
	out := map[int]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "--" {
			continue
		}
		name, val, hasValue := strings.Cut(a, "=")
		if !hasValue && i+1 < len(args) {
			val = args[i+1]
		}
		// A join token (-join TOKEN) carries the cluster secret.
		if !secretName(name) && !strings.HasPrefix(val, joinTokenPrefix) {
			continue
		}
		if hasValue {
			out[i] = true
		} else if i+1 < len(args) {
			out[i+1] = true
			i++
		}
	}
	return out
}

// carriesSecrets reports whether c's command line or environment holds a
// secret.
func (c Config) carriesSecrets() bool {
	if len(secretArgs(c.Args)) > 0 {
		return true
	}
	for _, e := range c.Env {
		if secretName(e.Name) {
			return true
		}
	}
	return false
}

// EnvFile is where a systemd service's secrets go (Linux only; "" on macOS).
func (c Config) EnvFile() string {
	if c.OS == "darwin" {
		return ""
	}
	return filepath.Join(filepath.Dir(c.Path()), "macpool-"+c.Role+".env")
}

// splitSecrets returns the unit's command-line arguments with every secret
// value replaced by a ${MACPOOL_SECRET_n} reference, the environment
// variables that stay in the unit, and the variables for the env file.
func (c Config) splitSecrets() (args []string, env, secret []EnvVar) {
	idx := secretArgs(c.Args)
	args = append([]string(nil), c.Args...)
	n := 0
	for i := range args {
		if !idx[i] {
			continue
		}
		n++
		v := fmt.Sprintf("MACPOOL_SECRET_%d", n)
		if name, val, ok := strings.Cut(args[i], "="); ok && strings.HasPrefix(args[i], "-") {
			secret = append(secret, EnvVar{v, val})
			args[i] = name + "=${" + v + "}"
		} else {
			secret = append(secret, EnvVar{v, args[i]})
			args[i] = "${" + v + "}"
		}
	}
	for _, e := range c.sortedEnv() {
		if secretName(e.Name) {
			secret = append(secret, e)
		} else {
			env = append(env, e)
		}
	}
	return args, env, secret
}

// RenderEnvFile returns the environment file of c's secrets (systemd's
// EnvironmentFile= syntax), or nil if there are none or c is for macOS.
func RenderEnvFile(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.OS == "darwin" {
		return nil, nil
	}
	_, _, secret := c.splitSecrets()
	if len(secret) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString("# Written by \"macpool service install\" (mode 0600): the secrets of " + c.UnitName() + ".\n")
	for _, e := range secret {
		// Single quotes keep $, \ and spaces literal in EnvironmentFile=.
		if strings.Contains(e.Value, "'") {
			return nil, fmt.Errorf("service secret %s must not contain a single quote", e.Name)
		}
		fmt.Fprintf(&b, "%s='%s'\n", e.Name, e.Value)
	}
	return []byte(b.String()), nil
}
