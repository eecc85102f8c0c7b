// Package loadtest holds tests of engine/checkpoint that need a backend
// (engine/cpu) and engine/synth: what a loaded checkpoint costs in resident
// memory. It has no non-test code.
package loadtest
