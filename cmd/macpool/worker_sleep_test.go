package main

import (
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestSleepDrainFlags(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	fs := newFlagSet("worker", io.Discard)
	var f sleepFlags
	f.register(fs)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if f.on != (runtime.GOOS == "darwin") || f.timeout != 10*time.Second {
		t.Fatalf("defaults: sleep-drain %v timeout %v, want %v and 10s", f.on, f.timeout, runtime.GOOS == "darwin")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = no error
	}{
		{"off", []string{"-sleep-drain=false"}, ""},
		{"off ignores timeout", []string{"-sleep-drain=false", "-sleep-drain-timeout", "1h"}, ""},
		{"too long", []string{"-sleep-drain", "-sleep-drain-timeout", "21s"}, "-sleep-drain-timeout 21s must be between 0 and 20s"},
		{"negative", []string{"-sleep-drain", "-sleep-drain-timeout", "-1s"}, "-sleep-drain-timeout -1s must be between 0 and 20s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("worker", io.Discard)
			var f sleepFlags
			f.register(fs)
			if err := parseFlags(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			s, err := f.start(logger)
			defer s.close()
			if tc.want == "" {
				if err != nil || s != nil {
					t.Fatalf("got watch %v err %v, want neither", s, err)
				}
				return
			}
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
	if runtime.GOOS != "darwin" {
		// Asked for where the notifications do not exist: a usage error.
		f := sleepFlags{on: true, timeout: time.Second}
		if _, err := f.start(logger); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "only available on macOS") {
			t.Fatalf("-sleep-drain on %s: got %v, want a usage error naming macOS", runtime.GOOS, err)
		}
	}
}
