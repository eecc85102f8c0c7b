//go:build !darwin

package worker

// preventSleep does nothing outside macOS: servers do not idle-sleep, and
// Linux desktops would need logind inhibitors (not done).
func preventSleep(reason string) (release func(), err error) { return func() {}, nil }
