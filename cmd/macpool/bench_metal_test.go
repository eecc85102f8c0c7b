//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/macpool/macpool/metal/emu"
)

// TestBenchMetalEmulated: bench on the emulated Metal backend prints the
// usual figures plus the backend's, says that the emulator's speed means
// nothing, and reports no bandwidth share (no chip).
func TestBenchMetalEmulated(t *testing.T) {
	if _, err := emu.FindCompiler(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"bench", "--backend", "metal-emulated", "--synthetic", "tiny", "--threads", "2", "--prompt-tokens", "16", "--gen-tokens", "4", "--json"}
	if code := runMain(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errb.String())
	}
	// The host code ran against the fake Objective-C runtime and broke
	// none of its rules.
	if e := errb.String(); !strings.Contains(e, "metal-emulated: ") || !strings.Contains(e, " checked, 0 violations") {
		t.Errorf("stderr %q lacks the metal-emulated line with 0 violations", e)
	}
	var res map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json output %q: %v", out.String(), err)
	}
	note, _ := res["note"].(string)
	if res["backend"] != "metal-emulated" || res["chip"] != "metal-emulated" || res["impl"] != "metal-emulated" || !strings.Contains(note, "emulator") {
		t.Errorf("backend/chip/impl/note = %v/%v/%v/%v", res["backend"], res["chip"], res["impl"], res["note"])
	}
	if v, ok := res["decode_tok_s"].(float64); !ok || !(v > 0) {
		t.Errorf("decode_tok_s = %v", res["decode_tok_s"])
	}
	if _, ok := res["bandwidth_share"]; ok {
		t.Errorf("bandwidth_share %v reported for the emulator", res["bandwidth_share"])
	}
}
