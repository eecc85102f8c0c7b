package metal

import (
	"fmt"
	"strings"
)

// HostStats is what the fake Objective-C runtime under metal-emulated saw:
// the host code's messages, how many were checked against Apple's selector
// table, and the rules broken (EmulatedHostStats).
type HostStats struct {
	Messages, Checked, Violations uint64
	First                         []string // the first violations, described
}

// String is the line `macpool logits|run|bench --backend metal-emulated`
// prints to stderr.
func (s HostStats) String() string {
	return fmt.Sprintf("metal-emulated: %d objc messages, %d checked, %d violations", s.Messages, s.Checked, s.Violations)
}

// Err is nil without violations, else a *ViolationsError: a command that
// broke a rule a Mac enforces fails.
func (s HostStats) Err() error {
	if s.Violations == 0 {
		return nil
	}
	return &ViolationsError{N: s.Violations, First: s.First}
}

// ViolationsError reports rules of the Objective-C runtime or Metal that
// the host code broke under metal-emulated.
type ViolationsError struct {
	N     uint64
	First []string
}

func (e *ViolationsError) Error() string {
	return fmt.Sprintf("metal-emulated: %d violations of Objective-C/Metal rules: %s", e.N, strings.Join(e.First, "; "))
}
