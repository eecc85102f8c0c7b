//go:build !darwin

package mtl

import "errors"

// ErrNotDarwin is returned off macOS.
var ErrNotDarwin = errors.New("mtl: Metal needs macOS")

// Hardware reports ErrNotDarwin off macOS.
func Hardware() (HardwareInfo, error) { return HardwareInfo{}, ErrNotDarwin }
