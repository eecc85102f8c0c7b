package main

import (
	"flag"

	_ "github.com/macpool/macpool/metal" // registers "metal" (macOS) and "metal-emulated" (Linux)
)

// backendFlag adds --backend to a command that loads a model (owner: metal;
// used by run and logits). The names are engine.RegisterBackend names.
func backendFlag(fs *flag.FlagSet) *string {
	return fs.String("backend", "cpu", "compute backend: cpu, metal (macOS, Apple GPU) or metal-emulated (Linux, slow; for verification)")
}
