package deploy

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

func TestParseEnvVarAndAddEnv(t *testing.T) {
	if _, err := ParseEnvVar("novalue"); err == nil {
		t.Error("ParseEnvVar(novalue): got no error")
	}
	if ev, err := ParseEnvVar("A=b=c"); err != nil || ev != (EnvVar{"A", "b=c"}) {
		t.Errorf("ParseEnvVar(A=b=c) = %v, %v", ev, err)
	}
	var c Config
	env := map[string]string{"HF_HOME": "/srv/hf", "HF_TOKEN": "shell"}
	c.AddEnv([]EnvVar{{"HF_TOKEN", "given"}}, "HF_HOME, HF_TOKEN,MISSING,", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if want := []EnvVar{{"HF_TOKEN", "given"}, {"HF_HOME", "/srv/hf"}}; !slices.Equal(c.Env, want) {
		t.Errorf("Env = %v, want %v", c.Env, want)
	}
}

// Report skips services that are not installed when no role was named.
func TestReport(t *testing.T) {
	home := t.TempDir()
	cfg := darwinConfig(home)
	r := &fakeRunner{answers: map[string]fakeAnswer{"launchctl print gui/501/com.macpool.up": {err: errExit}}}
	var out bytes.Buffer
	if err := Report(context.Background(), []Config{cfg}, r, true, &out); err != nil || !strings.Contains(out.String(), "no macpool service is installed") {
		t.Errorf("Report of nothing installed: %v, %q", err, out.String())
	}
	if err := Report(context.Background(), []Config{cfg}, r, false, &out); err == nil {
		t.Error("Report of a named service that is not installed: got no error")
	}
}
