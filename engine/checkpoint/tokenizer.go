package checkpoint

import (
	"fmt"

	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/tokenizer"
)

// LoadTokenizer loads the tokenizer of a checkpoint: from a GGUF file's
// metadata (IsGGUF), else a folder's tokenizer.json (tokenizer.Load, whose
// error for a folder without one matches fs.ErrNotExist).
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if !IsGGUF(path) {
		return tokenizer.Load(path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	defer f.Close()
	return f.Tokenizer()
}
