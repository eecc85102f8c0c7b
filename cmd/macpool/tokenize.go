package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/tokenizer"
)

func init() {
	register("tokenize", "print the token ids of a text as a JSON array", runTokenize)
	register("detokenize", "print the text of comma-separated token ids", runDetokenize)
}

// runTokenize encodes --text or the contents of --file ("-" = stdin) with
// the tokenizer of --model (only the tokenizer files are read) and prints
// the ids as one JSON array line. Special-token text is matched as such.
func runTokenize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", stderr)
	model := fs.String("model", "", "model folder with tokenizer.json, or .gguf file")
	text := fs.String("text", "", "text to tokenize")
	file := fs.String("file", "", `file to tokenize ("-" = stdin)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := given(fs)
	if *model == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if set["text"] == set["file"] {
		return fmt.Errorf("%w: give exactly one of --text and --file", errUsage)
	}
	input := *text
	if set["file"] {
		var data []byte
		var err error
		if *file == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(*file)
		}
		if err != nil {
			return fmt.Errorf("read input: %w", err)
		}
		input = string(data)
	}
	tok, err := checkpoint.LoadTokenizer(*model)
	if err != nil {
		return err
	}
	ids := tok.Encode(input)
	b := make([]byte, 0, 8*len(ids)+3)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, ']', '\n')
	_, err = stdout.Write(b)
	return err
}

// runDetokenize decodes --tokens ("1,2,3", or a JSON array as tokenize
// prints it) and prints the text exactly, without adding a newline.
func runDetokenize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("detokenize", stderr)
	model := fs.String("model", "", "model folder with tokenizer.json, or .gguf file")
	tokens := fs.String("tokens", "", `token ids, comma-separated ("9707,11,1879") or a JSON array`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if !given(fs)["tokens"] {
		return fmt.Errorf("%w: --tokens is required", errUsage)
	}
	ids, err := tokenizer.ParseIDs(*tokens)
	if err != nil {
		return fmt.Errorf("%w: --tokens: %v", errUsage, err)
	}
	tok, err := checkpoint.LoadTokenizer(*model)
	if err != nil {
		return err
	}
	for i, id := range ids {
		if _, ok := tok.Token(id); !ok {
			return fmt.Errorf("token id %d (position %d) is not in the vocabulary (ids 0..%d)", id, i, tok.VocabSize()-1)
		}
	}
	_, err = io.WriteString(stdout, tok.Decode(ids))
	return err
}
