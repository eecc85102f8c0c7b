package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// clusterStatus serves Admin.Status at admin.StatusPath (macpool status,
// macpool top, the dashboard).
func (s *Server) clusterStatus(c *gin.Context) {
	writeJSON(c, http.StatusOK, s.cfg.Admin.Status(c.Request.Context()))
}
