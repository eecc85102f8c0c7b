package coordinator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// boltStore is a raft.LogStore and raft.StableStore on go.etcd.io/bbolt.
//
// raft-boltdb/v2 v2.3.1 cannot be used: it imports
// github.com/hashicorp/go-metrics/compat, which go-metrics dropped after
// v0.6.1, while raft v1.8.0 and memberlist v0.7.0 require go-metrics v0.7.0.
// This store keeps raft-boltdb's layout (a "logs" bucket keyed by big-endian
// index, a "conf" bucket for stable values) so it reads the same way.
type boltStore struct {
	db *bolt.DB
}

var (
	bucketLogs = []byte("logs")
	bucketConf = []byte("conf")

	// errKeyNotFound is what raft expects from StableStore for a missing key.
	errKeyNotFound = errors.New("not found")
)

func openBoltStore(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open raft store %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketConf)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init raft store %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// FirstIndex implements raft.LogStore.
func (s *boltStore) FirstIndex() (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().First(); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

// LastIndex implements raft.LogStore.
func (s *boltStore) LastIndex() (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLogs).Cursor().Last(); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

var msgpackHandle = &codec.MsgpackHandle{}

// GetLog implements raft.LogStore.
func (s *boltStore) GetLog(index uint64, log *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(u64(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		return codec.NewDecoderBytes(v, msgpackHandle).Decode(log)
	})
}

// StoreLog implements raft.LogStore.
func (s *boltStore) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore.
func (s *boltStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			var buf []byte
			if err := codec.NewEncoderBytes(&buf, msgpackHandle).Encode(l); err != nil {
				return fmt.Errorf("encode raft log %d: %w", l.Index, err)
			}
			if err := b.Put(u64(l.Index), buf); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange implements raft.LogStore.
func (s *boltStore) DeleteRange(min, max uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketLogs).Cursor()
		for k, _ := c.Seek(u64(min)); k != nil; k, _ = c.Next() {
			if binary.BigEndian.Uint64(k) > max {
				break
			}
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Set implements raft.StableStore.
func (s *boltStore) Set(k, v []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketConf).Put(k, v) })
}

// Get implements raft.StableStore.
func (s *boltStore) Get(k []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketConf).Get(k)
		if v == nil {
			return errKeyNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

// SetUint64 implements raft.StableStore.
func (s *boltStore) SetUint64(k []byte, v uint64) error { return s.Set(k, u64(v)) }

// GetUint64 implements raft.StableStore.
func (s *boltStore) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}
