package qwen

// SetLinearQuantized sets linearQuantized for a test and returns the old value.
func SetLinearQuantized(v bool) bool { old := linearQuantized; linearQuantized = v; return old }
