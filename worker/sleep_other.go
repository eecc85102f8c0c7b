//go:build !darwin

package worker

// systemPower is not available outside macOS (Linux would need logind's
// PrepareForSleep signal over D-Bus: not done).
func systemPower() (powerSource, error) { return nil, ErrSleepUnsupported }
