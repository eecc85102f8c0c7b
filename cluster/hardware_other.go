//go:build !linux && !darwin

package cluster

func detectHardware() Hardware { return Hardware{} }
