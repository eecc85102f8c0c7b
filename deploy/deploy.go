// Package deploy installs macpool as a service of the operating system's
// service manager: a launchd agent on macOS (runs in the user's GUI session,
// where the Metal GPU is available) and a systemd unit on Linux (user or
// system unit, logs in the journal). It renders the service definition from
// embedded templates and drives launchctl / systemctl through a Runner, so
// the commands can be checked by tests without touching the machine.
package deploy

import (
	"bytes"
	"embed"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

//go:embed templates/*.tmpl
var templates embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"xml":          xmlEscape,
	"systemdQuote": envQuote,
	"unitValue":    func(s string) string { return strings.ReplaceAll(s, "%", "%%") },
}).ParseFS(templates, "templates/*.tmpl"))

// Roles are the macpool commands that can run as a service.
var Roles = []string{"up", "coordinator", "worker"}

// ErrNotInstalled: uninstall or status of a service that has no definition
// file and is not loaded.
var ErrNotInstalled = errors.New("not installed")

// EnvVar is one environment variable of the service.
type EnvVar struct{ Name, Value string }

// Config describes one macpool service.
type Config struct {
	// OS is "darwin" (launchd agent) or "linux" (systemd unit).
	OS string
	// Role is the macpool command the service runs: up, coordinator or worker.
	Role string
	// Args are the role's flags, as typed after "macpool ROLE".
	Args []string
	// Binary is the absolute path of the macpool executable.
	Binary string
	// HomeDir is the home of the user the service belongs to (plist, logs,
	// user units).
	HomeDir string
	// UID is the user id whose launchd GUI domain (gui/UID) gets the agent.
	UID int
	// System (linux) installs a system unit in SystemUnitDir instead of a
	// user unit in UserUnitDir.
	System bool
	// User (linux system unit) is the account the service runs as ("" = root).
	User string
	// SystemUnitDir is where system units go.
	SystemUnitDir string
	// UserUnitDir is where user units go ("" = HomeDir/.config/systemd/user).
	UserUnitDir string
	// WorkingDir is the service's working directory (relative paths in Args
	// are relative to it); "" leaves the service manager's default.
	WorkingDir string
	// Env is the service's environment (it does not inherit a shell's).
	Env []EnvVar
}

// DefaultConfig returns a Config with the standard system unit folder.
func DefaultConfig() Config {
	return Config{SystemUnitDir: "/etc/systemd/system"}
}

// Validate checks the configuration; messages name the violated constraint.
func (c Config) Validate() error {
	if c.OS != "darwin" && c.OS != "linux" {
		return fmt.Errorf("service OS %q must be darwin (launchd) or linux (systemd)", c.OS)
	}
	if !isRole(c.Role) {
		return fmt.Errorf("service role %q must be one of %s", c.Role, strings.Join(Roles, ", "))
	}
	if !filepath.IsAbs(c.Binary) {
		return fmt.Errorf("service binary %q must be an absolute path", c.Binary)
	}
	if !filepath.IsAbs(c.HomeDir) {
		return fmt.Errorf("service home dir %q must be an absolute path", c.HomeDir)
	}
	if c.WorkingDir != "" && !filepath.IsAbs(c.WorkingDir) {
		return fmt.Errorf("service working dir %q must be an absolute path", c.WorkingDir)
	}
	if c.OS == "darwin" {
		if c.System || c.User != "" {
			return errors.New("service: system-wide install and -user are for linux; on macOS the agent runs in the installing user's session")
		}
		if c.UID <= 0 {
			return fmt.Errorf("service uid %d: launchd agents belong to a logged-in user's GUI session; install as that user, not root", c.UID)
		}
	}
	if c.User != "" && !c.System {
		return errors.New("service user must only be set with a system unit (-system)")
	}
	if c.System && !filepath.IsAbs(c.SystemUnitDir) {
		return fmt.Errorf("service system unit dir %q must be an absolute path", c.SystemUnitDir)
	}
	for _, v := range append([]string{c.Binary, c.WorkingDir, c.User}, c.Args...) {
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("service command line value %q must not contain newlines or NUL", v)
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if e.Name == "" || strings.ContainsAny(e.Name, "= \t\n\r\x00") {
			return fmt.Errorf("service environment variable name %q must be non-empty without '=' or spaces", e.Name)
		}
		if strings.ContainsAny(e.Value, "\n\r\x00") {
			return fmt.Errorf("service environment variable %s must not contain newlines or NUL", e.Name)
		}
		if seen[e.Name] {
			return fmt.Errorf("service environment variable %s is given twice", e.Name)
		}
		seen[e.Name] = true
	}
	return nil
}

func isRole(r string) bool {
	for _, x := range Roles {
		if r == x {
			return true
		}
	}
	return false
}

// Label is the launchd label, also the base of the plist's file name.
func (c Config) Label() string { return "com.macpool." + c.Role }

// UnitName is the systemd unit name.
func (c Config) UnitName() string { return "macpool-" + c.Role + ".service" }

// Path is where the service definition is written.
func (c Config) Path() string {
	switch {
	case c.OS == "darwin":
		return filepath.Join(c.HomeDir, "Library", "LaunchAgents", c.Label()+".plist")
	case c.System:
		return filepath.Join(c.SystemUnitDir, c.UnitName())
	case c.UserUnitDir != "":
		return filepath.Join(c.UserUnitDir, c.UnitName())
	}
	return filepath.Join(c.HomeDir, ".config", "systemd", "user", c.UnitName())
}

// LogFile is where a launchd agent's stdout and stderr go (macOS); systemd
// units log to the journal.
func (c Config) LogFile() string {
	return filepath.Join(c.HomeDir, "Library", "Logs", "macpool", c.Role+".log")
}

// LogHint tells an operator how to follow the service's log.
func (c Config) LogHint() string {
	switch {
	case c.OS == "darwin":
		return "tail -f " + c.LogFile()
	case c.System:
		return "journalctl -u " + c.UnitName() + " -f"
	}
	return "journalctl --user -u " + c.UnitName() + " -f"
}

// command is the service's argv.
func (c Config) command() []string {
	return append([]string{c.Binary, c.Role}, c.Args...)
}

func (c Config) sortedEnv() []EnvVar {
	env := append([]EnvVar(nil), c.Env...)
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	return env
}

// Render returns the service definition for c.OS.
func Render(c Config) ([]byte, error) {
	if c.OS == "darwin" {
		return RenderPlist(c)
	}
	return RenderUnit(c)
}

// RenderPlist returns the launchd agent property list of c.
func RenderPlist(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	data := map[string]any{
		"Label": c.Label(), "Command": c.command(), "WorkingDir": c.WorkingDir,
		"Env": c.sortedEnv(), "LogFile": c.LogFile(),
	}
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, "launchd.plist.tmpl", data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RenderUnit returns the systemd unit of c.
func RenderUnit(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	args, env, secret := c.splitSecrets() // secrets.go: secrets go to EnvFile
	argv := append([]string{c.Binary, c.Role}, args...)
	refs := secretArgs(c.Args)
	quoted := make([]string, len(argv))
	for i, a := range argv {
		if i >= 2 && refs[i-2] {
			quoted[i] = secretRef(a) // ${MACPOOL_SECRET_n}: expanded by systemd
		} else {
			quoted[i] = execQuote(a)
		}
	}
	envFile := ""
	if len(secret) > 0 {
		envFile = c.EnvFile()
	}
	wantedBy := "default.target"
	if c.System {
		wantedBy = "multi-user.target"
	}
	data := map[string]any{
		"Role": c.Role, "ExecStart": strings.Join(quoted, " "), "WorkingDir": c.WorkingDir,
		"User": c.User, "Env": env, "EnvFile": envFile, "WantedBy": wantedBy, "System": c.System,
	}
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, "systemd.service.tmpl", data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// execQuote quotes one ExecStart argument: systemd expands %specifiers and
// $VARIABLES there, so both are doubled; whitespace, quotes, backslashes and
// ';' need double quotes.
func execQuote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	return quoteIfNeeded(s)
}

// secretRef quotes an argument holding a ${MACPOOL_SECRET_n} reference:
// the reference is kept for systemd to expand (unlike execQuote's $$), the
// rest escaped as usual.
func secretRef(s string) string {
	i := strings.Index(s, "${MACPOOL_SECRET_")
	if i < 0 {
		return execQuote(s)
	}
	prefix := strings.ReplaceAll(strings.ReplaceAll(s[:i], "%", "%%"), "$", "$$")
	return quoteIfNeeded(prefix + s[i:])
}

// envQuote quotes an Environment= assignment (specifiers expanded, $ literal).
func envQuote(s string) string {
	return quoteIfNeeded(strings.ReplaceAll(s, "%", "%%"))
}

func quoteIfNeeded(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}
