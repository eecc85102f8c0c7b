// Package modeltest holds the whole-model GGUF test (fixture logits through
// engine.Load and the CPU backend), apart from package gguf so that gguf's own
// tests do not depend on the engine. It has no non-test code.
package modeltest
