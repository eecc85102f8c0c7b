package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDiscoverJoinDisabled(t *testing.T) {
	f := discoveryFlags{off: true}
	var cf clusterFlags
	err := f.discoverJoin(context.Background(), &cf, nil, io.Discard)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-join is required with -no-discovery") {
		t.Errorf("got %v, want a usage error asking for -join", err)
	}
}
