package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain keeps the tests away from the developer's own macpool home: a
// coordinator started without a secret creates one there (secure.go).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "macpool-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("MACPOOL_HOME", dir)
	for _, v := range []string{"MACPOOL_SECRET_FILE", "MACPOOL_CLUSTER_SECRET", "MACPOOL_API_KEY", "MACPOOL_ADMIN_KEY", "MACPOOL_COORDINATOR"} {
		os.Unsetenv(v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
