package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// resolveModel maps an alias (Config.ModelAliases) to the served model.
func (s *Server) resolveModel(name string) string {
	if m, ok := s.cfg.ModelAliases[name]; ok {
		return m
	}
	return name
}

// submitAgentJob submits job for the Messages and Responses surfaces. An
// unknown model becomes a 404 that lists what the pool serves and how to
// alias a name: agents send their vendor's model names, and the person
// setting one up needs to know what to put instead.
func (s *Server) submitAgentJob(ctx context.Context, j *job.Job, requested string) (job.Stream, *openai.Error) {
	st, err := s.svc.Submit(ctx, j)
	if err == nil {
		return st, nil
	}
	oe := asError(err)
	if oe.Code == "model_not_found" {
		return nil, s.modelNotFound(ctx, requested)
	}
	return nil, oe
}

func (s *Server) modelNotFound(ctx context.Context, requested string) *openai.Error {
	var names []string
	if list, err := s.svc.Models(ctx); err == nil {
		for _, m := range list {
			names = append(names, m.ID)
		}
	}
	for a := range s.cfg.ModelAliases {
		names = append(names, a)
	}
	slices.Sort(names)
	served := "none"
	if len(names) > 0 {
		served = strings.Join(names, ", ")
	}
	return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q is not served by this pool; available models: %s (an operator can map other names with --model-alias NAME=MODEL)", requested, served)}
}
