package prefix

import (
	"encoding/json"
	"testing"

	"github.com/macpool/macpool/api/openai"
)

func chat(msgs ...string) *openai.ChatCompletionRequest {
	r := &openai.ChatCompletionRequest{Model: "m"}
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		r.Messages = append(r.Messages, openai.ChatMessage{Role: role, Content: openai.TextContent(m)})
	}
	return r
}

// Keys survive the JSON trip coordinator → worker, a follow-up turn shares
// the keys of the conversation so far, and any change of a message, the
// tools or the model changes every key from there on.
func TestChatKeys(t *testing.T) {
	a := Chat(chat("hi", "hello", "how are you"))
	b, _ := json.Marshal(chat("hi", "hello", "how are you"))
	var back openai.ChatCompletionRequest
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := Chat(&back); len(got) != 3 || got[2] != a[2] {
		t.Fatalf("after JSON: %x, want %x", got, a)
	}
	follow := Chat(chat("hi", "hello", "how are you", "fine", "and then?"))
	if follow[2] != a[2] || follow[4] == a[2] {
		t.Errorf("follow-up keys %x do not extend %x", follow, a)
	}
	other := Chat(chat("hi", "HELLO", "how are you"))
	if other[0] != a[0] || other[1] == a[1] || other[2] == a[2] {
		t.Errorf("changed message 1: %x vs %x", other, a)
	}
	withTools := chat("hi")
	withTools.Tools = []openai.Tool{{Type: "function", Function: openai.FunctionDefinition{Name: "f"}}}
	if Chat(withTools)[0] == a[0] {
		t.Error("tools do not change the keys")
	}
	set := map[uint64]bool{a[0]: true, a[1]: true}
	if n := Longest(follow, func(k uint64) bool { return set[k] }); n != 2 {
		t.Errorf("longest held prefix %d messages, want 2", n)
	}
}

func TestCompletionKeys(t *testing.T) {
	long := make([]byte, 3*TextChunk+10)
	for i := range long {
		long[i] = byte('a' + i%26)
	}
	k := Completion(&openai.CompletionRequest{Model: "m", Prompt: openai.TextPrompt(string(long))})
	if len(k) != 3 {
		t.Fatalf("%d keys for %d bytes", len(k), len(long))
	}
	k2 := Completion(&openai.CompletionRequest{Model: "m", Prompt: openai.TextPrompt(string(long[:2*TextChunk]) + "x")})
	if len(k2) != 2 || k2[1] != k[1] {
		t.Errorf("shared 2-chunk prefix: %x vs %x", k2, k)
	}
	ids := make([]int, 70)
	if n := len(Completion(&openai.CompletionRequest{Prompt: openai.Prompt{Tokens: [][]int{ids}}})); n != 2 {
		t.Errorf("%d keys for 70 token ids, want 2", n)
	}
}
