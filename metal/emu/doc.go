// Package emu is the Metal emulator: a Linux implementation of the
// metal/gpu device interface that compiles the same MSL sources as C++ with
// clang (prelude.h maps Metal's keywords, types, math, SIMD-group functions
// and barriers; Translate generates one entry shim per kernel), caches the
// shared library by source hash, loads it with purego (no cgo) and runs every
// threadgroup with true threadgroup semantics (threads as fibers, shared
// threadgroup memory, barriers, 32-lane SIMD-groups). It exists to verify the
// kernels and whole models in CI; it is slow.
package emu
