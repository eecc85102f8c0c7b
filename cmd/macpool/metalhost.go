package main

import (
	"fmt"
	"io"

	"github.com/macpool/macpool/metal"
)

// reportEmulatedHost prints, after a command that ran on metal-emulated,
// the fake Objective-C runtime's line ("metal-emulated: N objc messages, N
// checked, V violations") and fails the command if the host code broke a
// rule a Mac enforces.
func reportEmulatedHost(backend string, stderr io.Writer, err error) error {
	if backend != "metal-emulated" {
		return err
	}
	s, ok := metal.EmulatedHostStats()
	if !ok || s.Messages == 0 {
		return err
	}
	fmt.Fprintln(stderr, s)
	if err == nil {
		err = s.Err()
	}
	return err
}
