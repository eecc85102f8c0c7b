package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
)

// MaxEmbeddingInputs is the most inputs one embeddings request may carry
// (OpenAI's limit).
const MaxEmbeddingInputs = 2048

// EmbeddingRequest is the body of POST /v1/embeddings.
type EmbeddingRequest struct {
	Model          string `json:"model"`
	Input          Prompt `json:"input"`
	EncodingFormat string `json:"encoding_format,omitempty"` // "float" (default) or "base64"
	Dimensions     *int   `json:"dimensions,omitempty"`
	User           string `json:"user,omitempty"`
}

// EmbeddingResponse is the answer of POST /v1/embeddings.
type EmbeddingResponse struct {
	Object string         `json:"object"` // "list"
	Data   []Embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  EmbeddingUsage `json:"usage"`
	// MacpoolWorker names the node that computed the vectors (as in chat
	// and completion responses).
	MacpoolWorker string `json:"macpool_worker,omitempty"`
}

// Embedding is one vector of the answer.
type Embedding struct {
	Object    string `json:"object"` // "embedding"
	Index     int    `json:"index"`
	Embedding Vector `json:"embedding"`
}

// Vector is an embedding vector. It marshals as a JSON array of numbers, or
// with Base64 set (encoding_format "base64") as a string holding the
// base64 of its values as little-endian float32 bytes, which is what the
// OpenAI SDKs decode. UnmarshalJSON accepts both forms.
type Vector struct {
	Values []float32
	Base64 bool
}

// MarshalJSON writes the array or the base64 string.
func (v Vector) MarshalJSON() ([]byte, error) {
	if !v.Base64 {
		if v.Values == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(v.Values)
	}
	b := make([]byte, 4*len(v.Values))
	for i, x := range v.Values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON reads either form.
func (v *Vector) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return err
		}
		if len(b)%4 != 0 {
			return errors.New("base64 embedding: length is not a multiple of 4 bytes")
		}
		v.Values, v.Base64 = make([]float32, len(b)/4), true
		for i := range v.Values {
			v.Values[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return nil
	}
	v.Base64 = false
	return json.Unmarshal(data, &v.Values)
}

// EmbeddingUsage counts the input tokens.
type EmbeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// ParseEmbeddingRequest decodes and validates an embeddings request body.
func ParseEmbeddingRequest(data []byte) (*EmbeddingRequest, *Error) {
	var req EmbeddingRequest
	if err := decode(data, &req); err != nil {
		if err.Param == "prompt" {
			err.Param = "input"
			err.Message = "input" + err.Message[len("prompt"):]
		}
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// Validate checks the request.
func (r *EmbeddingRequest) Validate() *Error {
	if r.Model == "" {
		return InvalidRequest("model", "model is required")
	}
	if r.Input.Len() == 0 {
		return InvalidRequest("input", "input must not be empty")
	}
	if n := r.Input.Len(); n > MaxEmbeddingInputs {
		return InvalidRequest("input", "input has %d items; at most %d are allowed", n, MaxEmbeddingInputs)
	}
	for i, t := range r.Input.Texts {
		if t == "" {
			return InvalidRequest("input", "input[%d] must not be an empty string", i)
		}
	}
	for i, t := range r.Input.Tokens {
		if len(t) == 0 {
			return InvalidRequest("input", "input[%d] must not be an empty token list", i)
		}
	}
	switch r.EncodingFormat {
	case "", "float", "base64":
	default:
		return InvalidRequest("encoding_format", "encoding_format must be \"float\" or \"base64\", got %q", r.EncodingFormat)
	}
	if r.Dimensions != nil && *r.Dimensions < 1 {
		return InvalidRequest("dimensions", "dimensions must be at least 1, got %d", *r.Dimensions)
	}
	return nil
}
