package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// mountHandlers serves Config.Handlers on the API's router, so that one
// http.Server (with Config's timeouts) serves everything on the port.
func (s *Server) mountHandlers(e *gin.Engine) {
	for p, h := range s.cfg.Handlers {
		route := p
		switch {
		case p == "/{$}":
			route = "/"
		case strings.HasSuffix(p, "/"):
			route = p + "*path"
		}
		hf := gin.WrapH(h)
		e.GET(route, hf)
		e.HEAD(route, hf)
	}
}

// validateHandlers checks Config.Handlers' paths: the subset of
// http.ServeMux patterns that mountHandlers can express in gin.
func validateHandlers(hs map[string]http.Handler) error {
	for p, h := range hs {
		switch {
		case h == nil:
			return fmt.Errorf("api handler for %q must not be nil", p)
		case p == "/{$}":
		case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "{}*: ") || p == "/":
			return fmt.Errorf(`api handler path %q must start with '/' and hold no wildcard (a path, a subtree ending in '/', or "/{$}" for the root)`, p)
		}
	}
	return nil
}
