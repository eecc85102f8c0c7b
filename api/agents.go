package api

import (
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/macpool/macpool/api/openai"
)

// Defaults of the in-process response store (Config.Responses nil).
const (
	memoryResponseTTL = 24 * time.Hour
	memoryResponseMax = 10000
)

// agentRoutes adds the two protocols coding agents speak: Anthropic's
// Messages (Claude Code, the Anthropic SDKs) and OpenAI's Responses (Codex,
// the Agents SDK).
func (s *Server) agentRoutes(v1 *gin.RouterGroup) {
	if s.cfg.Responses == nil {
		s.cfg.Responses = NewMemoryResponseStore(memoryResponseTTL, memoryResponseMax)
	}
	v1.POST("/messages", s.messages)
	v1.POST("/messages/count_tokens", s.countTokens)
	v1.POST("/responses", s.responses)
	v1.GET("/responses/:id", s.getResponse)
	v1.DELETE("/responses/:id", s.deleteResponse)
	v1.GET("/responses/:id/input_items", s.responseInputItems)
}

// protocolErrorWriter is the error writer of c's route: Anthropic's shape
// on the Messages routes (their SDKs parse no other), OpenAI's elsewhere.
func protocolErrorWriter(c *gin.Context) func(*gin.Context, *openai.Error) {
	if strings.HasPrefix(c.Request.URL.Path, "/v1/messages") {
		return writeAnthropicError
	}
	return writeError
}
