package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/macpool/macpool/engine/chat/template"
)

func init() {
	register("template", "print the prompt a chat-completions request renders to", runTemplate)
}

// runTemplate renders an OpenAI chat-completions request body (a JSON file,
// "-" for stdin) with the chat template of the model folder.
func runTemplate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("template", stderr)
	model := fs.String("model", "", "model folder (tokenizer_config.json or chat_template.jinja)")
	request := fs.String("request", "-", `chat-completions request body, JSON file ("-" = stdin)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *model == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	tp, err := template.Load(*model)
	if err != nil {
		return err
	}
	var body []byte
	if *request == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body, err = os.ReadFile(*request)
	}
	if err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	out, err := tp.RenderRequest(body)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, out)
	return err
}
