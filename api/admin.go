package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
)

// Admin is what macpool's own endpoints need from the cluster (api/admin
// lists them and holds their wire types); coordinator.Coordinator implements
// it. The handlers only translate: who is an admin, what is valid and what
// is stored is the implementation's business. Errors: an *openai.Error is
// sent as is; the api/admin sentinels (wrapped) become the statuses named
// there; anything else is a 503, since it means the cluster could not commit
// the change (no Raft leader, NATS down) and a retry may succeed.
type Admin interface {
	AdminAuth
	KeyAdmin
	Drainer
	ModelRegistry
	ClusterStatus
}

// AdminAuth decides who may use the admin endpoints.
type AdminAuth interface {
	// CheckAdmin authorises the bearer token of an admin request ("" when
	// none was sent): nil lets it in.
	CheckAdmin(ctx context.Context, token string) error
	// AdminOpen reports whether admin requests need no credential; the
	// first key created then must be an admin key, or nobody could manage
	// keys once it exists.
	AdminOpen() bool
}

// KeyAdmin manages API keys (macpool keys).
type KeyAdmin interface {
	Keys() []admin.KeyInfo
	CreateAPIKey(ctx context.Context, req admin.KeyRequest) (admin.CreatedKey, error)
	RevokeAPIKey(ctx context.Context, id string) error
}

// Drainer drains workers (macpool drain).
type Drainer interface {
	// DrainNode asks a worker to drain and leave; it returns once the
	// worker accepted. NodeDrainState is its progress as gossip shows it.
	DrainNode(ctx context.Context, node string, timeout time.Duration) (admin.DrainResponse, error)
	NodeDrainState(node string) admin.NodeDrainState
}

// ModelRegistry is the cluster's model registry (macpool models).
type ModelRegistry interface {
	ModelStatuses() []admin.ModelStatus
	AddManagedModel(ctx context.Context, req admin.AddModelRequest) (admin.ModelSpec, error)
	RemoveManagedModel(ctx context.Context, name string) error
}

// ClusterStatus reports the cluster (macpool status, macpool top, the
// dashboard).
type ClusterStatus interface {
	Status(ctx context.Context) admin.Status
}

// maxAdminBody bounds admin request bodies: they are a few small fields.
const maxAdminBody = 64 << 10

// adminRoutes mounts the endpoints of Config.Admin. They are outside the
// /v1 group's auth: the cluster's admin token is no API key. Listing models
// and the cluster status want an API key like the OpenAI routes; changes
// want an admin.
func (s *Server) adminRoutes(e *gin.Engine) {
	if s.cfg.Admin == nil {
		return
	}
	a := e.Group(admin.Path, s.adminAuth)
	a.GET("keys", s.listKeys)
	a.POST("keys", s.createKey)
	a.DELETE("keys/:id", s.revokeKey)
	a.POST("drain", s.drain)
	a.GET("drain/:node", s.drainState)
	e.GET(admin.ModelsPath, s.auth, s.listRegistry)
	a.POST("models", s.addModel)
	a.DELETE("models/*name", s.removeModel)
	e.GET(admin.StatusPath, s.auth, s.clusterStatus)
}

// adminAuth lets admins through (Admin.CheckAdmin).
func (s *Server) adminAuth(c *gin.Context) {
	err := s.cfg.Admin.CheckAdmin(c.Request.Context(), bearerToken(c))
	if err == nil {
		return
	}
	var oe *openai.Error
	if !errors.As(err, &oe) {
		oe = openai.Unauthorized("an admin API key is required")
	}
	writeError(c, oe)
}

// adminGuard runs before the 404 and 405 answers: under the admin prefix
// only an admin learns which paths exist.
func (s *Server) adminGuard(c *gin.Context) {
	if s.cfg.Admin != nil && strings.HasPrefix(c.Request.URL.Path, admin.Path) {
		s.adminAuth(c)
	}
}

// bearerToken is the key of "Authorization: Bearer KEY", "" without one.
func bearerToken(c *gin.Context) string {
	scheme, token, _ := strings.Cut(c.GetHeader("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// readAdminJSON decodes a small JSON body strictly: an unknown field is a
// 400, so that a typo is not silently ignored.
func readAdminJSON(c *gin.Context, v any) *openai.Error {
	tooLarge := &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest,
		Message: fmt.Sprintf("request body exceeds %d bytes", maxAdminBody)}
	if c.Request.ContentLength > maxAdminBody {
		return tooLarge
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge
		}
		return openai.InvalidRequest("", "invalid JSON body: %v", err)
	}
	return nil
}

// adminError maps an Admin error to its OpenAI error; param names the
// request field a not-found or invalid error is about.
func adminError(err error, param string) *openai.Error {
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, admin.ErrKeyExists):
		return &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Param: param, Message: err.Error()}
	case errors.Is(err, admin.ErrKeyNotFound), errors.Is(err, admin.ErrNodeNotFound), errors.Is(err, admin.ErrModelNotFound):
		return &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: param, Message: err.Error()}
	case errors.Is(err, admin.ErrInvalidKey), errors.Is(err, admin.ErrNotWorker):
		return openai.InvalidRequest(param, "%v", err)
	}
	return openai.Unavailable("%v", err)
}

func (s *Server) listKeys(c *gin.Context) {
	keys := s.cfg.Admin.Keys()
	if keys == nil {
		keys = []admin.KeyInfo{}
	}
	writeJSON(c, http.StatusOK, gin.H{"object": "list", "data": keys})
}

func (s *Server) createKey(c *gin.Context) {
	var req admin.KeyRequest
	if oe := readAdminJSON(c, &req); oe != nil {
		writeError(c, oe)
		return
	}
	if !req.Admin && s.cfg.Admin.AdminOpen() {
		writeError(c, openai.InvalidRequest("admin",
			"the first API key must be an admin key (admin: true; macpool keys create --admin): once a key exists, only admin keys can manage keys"))
		return
	}
	k, err := s.cfg.Admin.CreateAPIKey(c.Request.Context(), req)
	if err != nil {
		writeError(c, adminError(err, "id"))
		return
	}
	writeJSON(c, http.StatusCreated, k)
}

func (s *Server) revokeKey(c *gin.Context) {
	id := c.Param("id")
	if err := s.cfg.Admin.RevokeAPIKey(c.Request.Context(), id); err != nil {
		writeError(c, adminError(err, "id"))
		return
	}
	writeJSON(c, http.StatusOK, gin.H{"id": id, "revoked": true})
}

func (s *Server) drain(c *gin.Context) {
	var req admin.DrainRequest
	if oe := readAdminJSON(c, &req); oe != nil {
		writeError(c, oe)
		return
	}
	if req.Node == "" {
		writeError(c, openai.InvalidRequest("node", "node must be set"))
		return
	}
	if req.TimeoutMS < 0 {
		writeError(c, openai.InvalidRequest("timeout_ms", "timeout_ms %d must not be negative", req.TimeoutMS))
		return
	}
	resp, err := s.cfg.Admin.DrainNode(c.Request.Context(), req.Node, time.Duration(req.TimeoutMS)*time.Millisecond)
	if err != nil {
		writeError(c, adminError(err, "node"))
		return
	}
	writeJSON(c, http.StatusAccepted, resp)
}

func (s *Server) drainState(c *gin.Context) {
	writeJSON(c, http.StatusOK, s.cfg.Admin.NodeDrainState(c.Param("node")))
}
