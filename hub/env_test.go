package hub

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestHubConfigFromEnv(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "hf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "hf", "token"), []byte("hf_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                   string
		env                    map[string]string
		cache, endpoint, token string
		offline                bool
	}{
		{name: "defaults", env: map[string]string{"HOME": home},
			cache: filepath.Join(home, ".cache", "huggingface", "hub"), endpoint: "https://huggingface.co"},
		{name: "HF_HOME and its token file", env: map[string]string{"HOME": home, "HF_HOME": filepath.Join(home, "hf")},
			cache: filepath.Join(home, "hf", "hub"), endpoint: "https://huggingface.co", token: "hf_file"},
		{name: "explicit", env: map[string]string{"HOME": home, "HF_HOME": filepath.Join(home, "hf"), "HF_HUB_CACHE": "/c",
			"MACPOOL_MODEL_CACHE": "/m", "HF_ENDPOINT": "http://mirror:8080", "HF_TOKEN": "hf_env", "HF_HUB_OFFLINE": "1"},
			cache: "/m", endpoint: "http://mirror:8080", token: "hf_env", offline: true},
		{name: "XDG", env: map[string]string{"HOME": home, "XDG_CACHE_HOME": "/x", "HF_HUB_CACHE": "/c"},
			cache: "/c", endpoint: "https://huggingface.co"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ConfigFromEnv(func(k string) string { return tt.env[k] }, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.CacheDir != tt.cache || cfg.Endpoint != tt.endpoint || cfg.Token != tt.token || cfg.Offline != tt.offline {
				t.Fatalf("got cache %q endpoint %q token %q offline %v, want %q %q %q %v",
					cfg.CacheDir, cfg.Endpoint, cfg.Token, cfg.Offline, tt.cache, tt.endpoint, tt.token, tt.offline)
			}
		})
	}
	if _, err := ConfigFromEnv(func(k string) string { return map[string]string{"HOME": home, "HF_ENDPOINT": "mirror"}[k] }, &bytes.Buffer{}); err == nil {
		t.Fatal("a bad HF_ENDPOINT was accepted")
	}
}
