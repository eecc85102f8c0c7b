//go:build !unix

package hub

import "context"

// lockFile is a no-op where flock is unavailable: concurrent downloads of
// one blob by two processes are then not prevented.
func lockFile(ctx context.Context, path string) (func(), error) { return func() {}, nil }
