package api

import (
	"context"
	"sync"
	"time"

	"github.com/macpool/macpool/api/admin"
)

// ResponseStore keeps stored Responses API responses, each an opaque JSON
// document under its response id ("resp_..."), for previous_response_id and
// GET/DELETE /v1/responses/{id}. Any coordinator must see what another
// stored (coordinator.ResponseStore keeps them in a JetStream key-value
// bucket); entries expire after the store's TTL.
type ResponseStore interface {
	PutResponse(ctx context.Context, id string, doc []byte) error
	// GetResponse returns admin.ErrResponseNotFound for an unknown id.
	GetResponse(ctx context.Context, id string) ([]byte, error)
	// DeleteResponse returns admin.ErrResponseNotFound for an unknown id.
	DeleteResponse(ctx context.Context, id string) error
}

// MemoryResponseStore is a ResponseStore in this process's memory, for a
// single coordinator and tests: entries expire after ttl, and beyond max
// entries the oldest go first.
type MemoryResponseStore struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu    sync.Mutex
	docs  map[string]memDoc
	order []string // insertion order, for eviction
}

type memDoc struct {
	doc     []byte
	expires time.Time
}

// NewMemoryResponseStore keeps up to max responses for ttl each.
func NewMemoryResponseStore(ttl time.Duration, max int) *MemoryResponseStore {
	return &MemoryResponseStore{ttl: ttl, max: max, now: time.Now, docs: map[string]memDoc{}}
}

// PutResponse implements ResponseStore.
func (m *MemoryResponseStore) PutResponse(_ context.Context, id string, doc []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.docs[id]; !ok {
		m.order = append(m.order, id)
	}
	m.docs[id] = memDoc{doc: append([]byte(nil), doc...), expires: m.now().Add(m.ttl)}
	for len(m.order) > 0 && (len(m.docs) > m.max || m.expired(m.order[0])) {
		delete(m.docs, m.order[0])
		m.order = m.order[1:]
	}
	return nil
}

// expired reports whether id is gone or past its expiry; call with mu held.
func (m *MemoryResponseStore) expired(id string) bool {
	d, ok := m.docs[id]
	return !ok || m.now().After(d.expires)
}

// GetResponse implements ResponseStore.
func (m *MemoryResponseStore) GetResponse(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.expired(id) {
		return nil, admin.ErrResponseNotFound
	}
	return m.docs[id].doc, nil
}

// DeleteResponse implements ResponseStore.
func (m *MemoryResponseStore) DeleteResponse(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.expired(id) {
		return admin.ErrResponseNotFound
	}
	delete(m.docs, id)
	return nil
}
