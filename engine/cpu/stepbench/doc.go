// Package stepbench measures whole decode steps of a real model shape on
// the CPU backend (benchmarks only): one stream vs 8
// streams batched through the paged KV cache (float32 or f16), in CPU time
// of the one thread that runs everything, so other processes on a shared
// machine do not distort the comparison (issue #7: aggregate decode at
// concurrency 8 vs one stream).
//
//	go test -run X -bench . -benchtime 1x ./engine/cpu/stepbench/
package stepbench
