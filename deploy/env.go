package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ParseEnvVar reads NAME=VALUE (macpool service install -env).
func ParseEnvVar(s string) (EnvVar, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return EnvVar{}, fmt.Errorf("%q must be NAME=VALUE", s)
	}
	return EnvVar{Name: name, Value: value}, nil
}

// AddEnv appends the variables given explicitly, then those named in pass
// (comma-separated) that lookup finds and that were not given: a service
// does not inherit the installing shell's environment, so what it needs
// (the Hugging Face cache, say) is copied into its definition. lookup is
// os.LookupEnv in the product.
func (c *Config) AddEnv(given []EnvVar, pass string, lookup func(string) (string, bool)) {
	set := map[string]bool{}
	for _, e := range given {
		set[e.Name] = true
	}
	c.Env = append(c.Env, given...)
	for _, name := range strings.Split(pass, ",") {
		name = strings.TrimSpace(name)
		if v, ok := lookup(name); ok && name != "" && !set[name] {
			c.Env = append(c.Env, EnvVar{Name: name, Value: v})
		}
	}
}

// Report writes the status of each service of cfgs to w. With all (no
// role was named) services that are not installed are skipped, and a line
// says so when none is.
func Report(ctx context.Context, cfgs []Config, run Runner, all bool, w io.Writer) error {
	found := 0
	for _, cfg := range cfgs {
		inst, err := New(cfg, run)
		if err != nil {
			return err
		}
		st, err := inst.Status(ctx)
		if errors.Is(err, ErrNotInstalled) && all {
			continue
		}
		if err != nil {
			return err
		}
		found++
		fmt.Fprintf(w, "%s:\n%s", cfg.Role, st)
	}
	if found == 0 && all {
		fmt.Fprintln(w, "no macpool service is installed")
	}
	return nil
}
