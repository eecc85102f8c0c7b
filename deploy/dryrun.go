package deploy

import (
	"fmt"
	"io"
	"strings"
)

// DryRun prints the service definition cfg would install and the names
// (never the values) of the secrets its 0600 environment file would hold.
func DryRun(cfg Config, w io.Writer) error {
	b, err := Render(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# %s\n%s", cfg.Path(), b)
	env, err := RenderEnvFile(cfg)
	if err != nil {
		return err
	}
	if env != nil {
		fmt.Fprintf(w, "# %s (mode 0600; values not shown)\n", cfg.EnvFile())
		for _, l := range strings.Split(strings.TrimSpace(string(env)), "\n") {
			if name, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
				fmt.Fprintf(w, "%s=...\n", name)
			}
		}
	}
	return nil
}
