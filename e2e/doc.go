// Package e2e holds macpool's multi-process cluster tests: the macpool
// binary is built once and run as a coordinator and workers on 127.0.0.1,
// driven with the official openai-go client. Workers use the test engine
// (--backend test), which echoes the prompt's words instantly.
package e2e
