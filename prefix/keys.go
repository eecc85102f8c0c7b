// Package prefix is prefix-aware routing's shared part: the keys of a
// request's prefixes, hashes that a coordinator (which has the request but
// neither the rendered prompt nor the tokenizer) and a worker (which renders
// and tokenizes it) compute alike; the bounded set of keys a worker served
// recently (Recent); and the Summary a worker advertises. The coordinator
// sends a request to the worker holding its longest key, whose KV prefix
// cache then most likely holds the prompt's rendered prefix
// (docs/cluster.md, "Prefix-aware routing").
//
// Keys are chained FNV-1a 64 hashes:
//   - chat: key i covers messages[0..i] (each message's JSON encoding as
//     openai.ChatMessage marshals it) after a root over the model, the tools
//     and chat_template_kwargs (they change the rendered system part);
//   - completion with a text prompt: key i covers the first (i+1)·TextChunk
//     bytes; with a token-id prompt the first (i+1)·TokenChunk ids.
//
// Only the first prompt of a multi-prompt completion is keyed.
package prefix

import (
	"encoding/binary"
	"encoding/json"

	"github.com/macpool/macpool/api/openai"
)

// Chunk sizes of completion prompts.
const (
	TextChunk  = 256 // bytes
	TokenChunk = 32  // token ids
)

type hasher uint64

const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

func start(prev uint64) hasher {
	h := hasher(offset64)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], prev)
	h.write(b[:])
	return h
}

func (h *hasher) write(p []byte) {
	x := uint64(*h)
	for _, c := range p {
		x = (x ^ uint64(c)) * prime64
	}
	*h = hasher(x)
}

func (h *hasher) writeJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("!" + err.Error())
	}
	h.write(b)
	h.write([]byte{0})
}

// Chat returns one key per message prefix: keys[i] covers messages[0..i].
func Chat(req *openai.ChatCompletionRequest) []uint64 {
	if req == nil {
		return nil
	}
	root := start(0)
	root.write([]byte("chat\x00" + req.Model + "\x00"))
	root.writeJSON(req.Tools)
	root.writeJSON(req.ChatTemplateKwargs)
	prev := uint64(root)
	keys := make([]uint64, 0, len(req.Messages))
	for _, m := range req.Messages {
		h := start(prev)
		h.writeJSON(m)
		prev = uint64(h)
		keys = append(keys, prev)
	}
	return keys
}

// Completion returns the keys of the first prompt's full chunks.
func Completion(req *openai.CompletionRequest) []uint64 {
	if req == nil {
		return nil
	}
	root := start(0)
	root.write([]byte("completion\x00" + req.Model + "\x00"))
	prev := uint64(root)
	var keys []uint64
	switch {
	case len(req.Prompt.Texts) > 0:
		s := req.Prompt.Texts[0]
		for i := 0; i+TextChunk <= len(s); i += TextChunk {
			h := start(prev)
			h.write([]byte(s[i : i+TextChunk]))
			prev = uint64(h)
			keys = append(keys, prev)
		}
	case len(req.Prompt.Tokens) > 0:
		ids := req.Prompt.Tokens[0]
		var b [4]byte
		for i := 0; i+TokenChunk <= len(ids); i += TokenChunk {
			h := start(prev)
			for _, id := range ids[i : i+TokenChunk] {
				binary.LittleEndian.PutUint32(b[:], uint32(id))
				h.write(b[:])
			}
			prev = uint64(h)
			keys = append(keys, prev)
		}
	}
	return keys
}

// Longest returns how many of keys (a request's chain) lead up to the
// deepest key for which has reports true, i.e. 1 + the index of that key;
// 0 if none. Keys are searched from the deepest down.
func Longest(keys []uint64, has func(uint64) bool) int {
	for i := len(keys) - 1; i >= 0; i-- {
		if has(keys[i]) {
			return i + 1
		}
	}
	return 0
}
