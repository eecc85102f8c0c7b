// Package admin holds the wire types of macpool's own HTTP endpoints, beside
// the OpenAI ones in api/openai: API keys, drain, the model registry and the
// cluster status. The coordinator produces these values, the api package
// serves them as JSON, and the CLI decodes them; keeping them here lets the
// coordinator implement the endpoints without importing the HTTP layer.
//
//	GET    /v1/admin/keys             list: id, name, admin, created, last used (never secrets)   admin
//	POST   /v1/admin/keys             create KeyRequest: the secret is in the answer, once         admin
//	DELETE /v1/admin/keys/{id}        revoke: later requests with it get 401                      admin
//	POST   /v1/admin/drain            DrainRequest: ask a worker to drain and leave               admin
//	GET    /v1/admin/drain/{node}     the node's progress: NodeDrainState                          admin
//	GET    /v1/admin/models           registry + placement + per-worker progress: ModelStatus     API key
//	POST   /v1/admin/models           add AddModelRequest                                          admin
//	DELETE /v1/admin/models/{name...} remove                                                       admin
//	GET    /v1/cluster/status         Status                                                       API key
//
// "admin" means an API key created with admin rights or the cluster's admin
// token; while the cluster stores no key and has no admin token every
// endpoint is open, and the first key created must be an admin key.
package admin

import "errors"

// Paths of the endpoints.
const (
	// Path is the prefix of the admin endpoints.
	Path = "/v1/admin/"
	// ModelsPath is the model registry.
	ModelsPath = "/v1/admin/models"
	// StatusPath is the cluster status.
	StatusPath = "/v1/cluster/status"
)

// Errors the coordinator returns (wrapped) and the HTTP layer maps to
// statuses: ErrInvalidKey 400, ErrKeyExists 409, ErrKeyNotFound,
// ErrNodeNotFound and ErrModelNotFound 404, ErrNotWorker 400.
var (
	ErrKeyExists     = errors.New("an api key with this id exists")
	ErrInvalidKey    = errors.New("invalid api key request")
	ErrKeyNotFound   = errors.New("no api key with this id")
	ErrNodeNotFound  = errors.New("no such node in the cluster")
	ErrNotWorker     = errors.New("only workers can be drained")
	ErrModelNotFound = errors.New("no such model in the registry")
)

// KeyInfo is an API key as listed (no secret, no hash).
type KeyInfo struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Admin    bool   `json:"admin,omitempty"`
	Created  int64  `json:"created,omitempty"`   // unix seconds
	LastUsed int64  `json:"last_used,omitempty"` // unix seconds, to within a minute; 0: never
}

// CreatedKey is the answer to a key creation: the only time the secret is shown.
type CreatedKey struct {
	KeyInfo
	Secret string `json:"secret"`
}

// KeyRequest creates a key.
type KeyRequest struct {
	ID    string `json:"id,omitempty"` // default: key-<random>
	Name  string `json:"name,omitempty"`
	Admin bool   `json:"admin,omitempty"`
	// Secret is a secret the operator chose (coordinator --api-key); never
	// read from a request body. Empty: a new random one.
	Secret string `json:"-"`
}

// DrainRequest is the body of POST /v1/admin/drain.
type DrainRequest struct {
	Node      string `json:"node"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"` // 0: the worker's default
}

// DrainResponse answers POST /v1/admin/drain.
type DrainResponse struct {
	Node    string `json:"node"`
	Running int    `json:"running"` // jobs running on the node when it began draining
}

// NodeDrainState is a node's progress as macpool drain shows it
// (GET /v1/admin/drain/{node}).
type NodeDrainState struct {
	Node    string `json:"node"`
	Present bool   `json:"present"` // still in gossip
	Leaving bool   `json:"leaving"` // gossips that it is draining / leaving
	Running int    `json:"running"` // jobs running (gossiped, at most MetaInterval old)
}

// ErrResponseNotFound is returned by a Responses API state store for an id
// it does not hold (never stored, deleted or expired).
var ErrResponseNotFound = errors.New("response not found")
