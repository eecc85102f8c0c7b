package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Role: RoleWorker, Version: "v1", Chip: "Apple M2 Max", Cores: 12, MemoryMB: 65536,
		Models: []string{"Qwen/Qwen3-8B"}, Free: 3, Slots: 4, Running: 1}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(m) {
		t.Fatalf("got %+v, want %+v", got, m)
	}
	if !got.Serves("Qwen/Qwen3-8B") || got.Serves("other") {
		t.Fatal("Serves is wrong")
	}
}

func TestParseMetaErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "empty"},
		{"{", "parse meta"},
		{`{"r":"boss"}`, `unknown role "boss"`},
	} {
		_, err := ParseMeta([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseMeta(%q): got %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestMetaTooLarge(t *testing.T) {
	m := Meta{Role: RoleWorker}
	for i := 0; i < 40; i++ {
		m.Models = append(m.Models, fmt.Sprintf("some-org/some-rather-long-model-name-%d", i))
	}
	if _, err := m.Encode(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("got %v, want ErrMetaTooLarge", err)
	}
}

func TestTokenAndSubjects(t *testing.T) {
	a, b := Token("Qwen/Qwen3-8B"), Token("qwen/qwen3-8b")
	if a == b {
		t.Fatalf("distinct names share token %q", a)
	}
	for _, tok := range []string{a, Token(""), Token("a.b*c>d e"), Token(strings.Repeat("x", 300))} {
		if strings.ContainsAny(tok, ".*> /\\") || len(tok) > 64 {
			t.Errorf("token %q is not a safe subject token / stream name", tok)
		}
	}
	if got, want := JobsSubject("m", ""), "macpool.jobs."+Token("m")+".anon"; got != want {
		t.Errorf("JobsSubject: got %q, want %q", got, want)
	}
	if got := StreamName("m"); !strings.HasPrefix(got, "JOBS_") {
		t.Errorf("StreamName: got %q", got)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	b := AppendFrame(nil, FrameEvent, 42, []byte(`{"Text":"hi"}`))
	f, err := ParseFrame(b)
	if err != nil || f.Kind != FrameEvent || f.Seq != 42 || string(f.Payload) != `{"Text":"hi"}` {
		t.Fatalf("got %+v %v", f, err)
	}
	if _, err := ParseFrame([]byte{FrameEnd, 0}); !errors.Is(err, ErrShortFrame) {
		t.Fatalf("short frame: got %v", err)
	}
}

func TestErrorRoundTrip(t *testing.T) {
	in := openai.RateLimited(1500*time.Millisecond, "slow down")
	out := DecodeError(EncodeError(in))
	if out.Status != 429 || out.RetryAfter != 1500*time.Millisecond || out.Message != "slow down" || out.Type != in.Type {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	if DecodeError([]byte("junk")).HTTPStatus() != 500 {
		t.Fatal("malformed error frame should become a 500")
	}
}

func TestDetectHardware(t *testing.T) {
	h := DetectHardware()
	if h.Cores < 1 || h.Chip == "" {
		t.Fatalf("got %+v", h)
	}
}

func TestConfigValidate(t *testing.T) {
	c := FastConfig()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "name") {
		t.Fatalf("missing name: got %v", err)
	}
	c.Name = "n"
	c.ProbeTimeout = c.ProbeInterval
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "probe interval") {
		t.Fatalf("probe timing: got %v", err)
	}
}
