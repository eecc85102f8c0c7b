package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/nats-io/nats.go/jetstream"
)

// Stored Responses API responses (store, previous_response_id) live in one
// JetStream key-value bucket that every coordinator reaches, so a client may
// continue a conversation on any coordinator. Entries expire after
// ResponseTTL; the bucket is replicated like the job queues.
const (
	responsesBucket = "macpool_responses"
	// ResponseTTL is how long a stored response can be continued or read.
	ResponseTTL = 24 * time.Hour
)

// ResponseStore is the cluster-wide api.ResponseStore of a coordinator.
type ResponseStore struct {
	c *Coordinator

	mu       sync.Mutex
	kv       jetstream.KeyValue
	replicas int // of kv as last created or updated
}

// ResponseStore returns the coordinator's response store (for
// api.Config.Responses).
func (c *Coordinator) ResponseStore() *ResponseStore { return &ResponseStore{c: c} }

// bucket opens the bucket, creating it on first use and growing its
// replicas as clustered coordinators join (never shrinking them).
func (s *ResponseStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.c.replicas()
	if s.kv != nil && s.replicas >= r {
		return s.kv, nil
	}
	kv, err := s.c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      responsesBucket,
		Description: "macpool stored Responses API responses",
		TTL:         ResponseTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	})
	if err != nil {
		return nil, fmt.Errorf("response store bucket: %w", err)
	}
	s.kv, s.replicas = kv, r
	return kv, nil
}

// validKey reports whether id can be a key: ids come from URLs and request
// bodies, and a key with other characters is simply not stored.
func validKey(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for _, r := range id {
		ok := r == '-' || r == '_' || r == '=' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}

// PutResponse implements api.ResponseStore.
func (s *ResponseStore) PutResponse(ctx context.Context, id string, doc []byte) error {
	if !validKey(id) {
		return fmt.Errorf("response id %q is not a valid key", id)
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, id, doc); err != nil {
		return fmt.Errorf("store response %s: %w", id, err)
	}
	return nil
}

// GetResponse implements api.ResponseStore.
func (s *ResponseStore) GetResponse(ctx context.Context, id string) ([]byte, error) {
	if !validKey(id) {
		return nil, admin.ErrResponseNotFound
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, admin.ErrResponseNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read response %s: %w", id, err)
	}
	return e.Value(), nil
}

// DeleteResponse implements api.ResponseStore.
func (s *ResponseStore) DeleteResponse(ctx context.Context, id string) error {
	if _, err := s.GetResponse(ctx, id); err != nil {
		return err
	}
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	// Purge, not Delete: nothing is kept of a deleted response.
	if err := kv.Purge(ctx, id); err != nil {
		return fmt.Errorf("delete response %s: %w", id, err)
	}
	return nil
}
