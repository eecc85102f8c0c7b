package openai

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "model"
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"` // context length, as vLLM reports it
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}
