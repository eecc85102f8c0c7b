//go:build !darwin

package runner

// defaultKVBytes off macOS is 0: the engine's default (the backend's
// engine.KVBudgeter, else engine.DefaultKVBytes capped at what the
// sequences' full contexts need). The KV pool is allocated up front, so a
// budget derived from a Linux server's RAM would be far too large.
func defaultKVBytes(weights int64) int64 { return 0 }
