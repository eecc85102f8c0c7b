package main

import (
	"fmt"
	"sort"
	"strings"
)

// aliasFlags collects repeated --model-alias NAME=MODEL flags: model names
// that clients send (agents insist on their vendor's, e.g.
// claude-sonnet-4-5) mapped to a model the pool serves.
type aliasFlags map[string]string

func (a *aliasFlags) String() string {
	var kv []string
	for k, v := range *a {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func (a *aliasFlags) Set(v string) error {
	name, model, ok := strings.Cut(v, "=")
	name, model = strings.TrimSpace(name), strings.TrimSpace(model)
	if !ok || name == "" || model == "" {
		return fmt.Errorf("want NAME=MODEL, got %q", v)
	}
	if *a == nil {
		*a = aliasFlags{}
	}
	(*a)[name] = model
	return nil
}
