package api

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
)

// The model registry of `macpool models` (Admin.ModelStatuses,
// AddManagedModel, RemoveManagedModel), under admin.ModelsPath.

func (s *Server) listRegistry(c *gin.Context) {
	list := s.cfg.Admin.ModelStatuses()
	if list == nil {
		list = []admin.ModelStatus{}
	}
	writeJSON(c, http.StatusOK, gin.H{"object": "list", "data": list})
}

func (s *Server) addModel(c *gin.Context) {
	var req admin.AddModelRequest
	if oe := readAdminJSON(c, &req); oe != nil {
		writeError(c, oe)
		return
	}
	spec, err := s.cfg.Admin.AddManagedModel(c.Request.Context(), req)
	if err != nil {
		oe := adminError(err, "")
		if oe.Type == openai.TypeUnavailable {
			oe = openai.Unavailable("add model: %v", err)
		}
		writeError(c, oe)
		return
	}
	writeJSON(c, http.StatusCreated, spec)
}

func (s *Server) removeModel(c *gin.Context) {
	// Names may hold slashes (Qwen/Qwen3-8B): the route's last part is a
	// catch-all with a leading "/".
	name := strings.TrimPrefix(c.Param("name"), "/")
	if err := s.cfg.Admin.RemoveManagedModel(c.Request.Context(), name); err != nil {
		oe := adminError(err, "name")
		if oe.Type == openai.TypeUnavailable {
			oe = openai.Unavailable("remove model: %v", err)
		}
		writeError(c, oe)
		return
	}
	writeJSON(c, http.StatusOK, gin.H{"name": name, "removed": true})
}
