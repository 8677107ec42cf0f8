package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Buckets of the node's store.
var (
	bucketSandboxes   = []byte("sandboxes")   // claim id → record
	bucketCheckpoints = []byte("checkpoints") // checkpoint id → ckRecord
	bucketMeta        = []byte("meta")        // "pools" → []poolTarget
	keyPools          = []byte("pools")
)

// poolTarget is a warm target as persisted (and as PUT /v1/pools asks).
type poolTarget struct {
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
	Warm     int32  `json:"warm"`
}

// store mirrors the claim table, the checkpoints and the pool targets in a
// bbolt file. See the package doc for its durability (NoSync).
type store struct{ db *bolt.DB }

// errStoreLocked means another process holds the data dir's store.
var errStoreLocked = errors.New("the data dir's store is locked (is another sandboxd using this --data-dir?)")

func openStore(path string) (*store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%s: %w", path, errStoreLocked)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketCheckpoints, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &store{db: db}, nil
}

func (s *store) close() error { return s.db.Close() }

// putSandboxes writes records in one transaction.
func (s *store) putSandboxes(recs ...record) error {
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		vals[i] = b
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		for i, r := range recs {
			if err := b.Put([]byte(r.ID), vals[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *store) deleteSandbox(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSandboxes).Delete([]byte(id)) })
}

func (s *store) sandboxes() ([]record, error) {
	var out []record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("sandbox record %q: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (s *store) putCheckpoint(c ckRecord) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCheckpoints).Put([]byte(c.Checkpoint.ID), b)
	})
}

func (s *store) deleteCheckpoint(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketCheckpoints).Delete([]byte(id)) })
}

func (s *store) checkpoints() ([]ckRecord, error) {
	var out []ckRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCheckpoints).ForEach(func(k, v []byte) error {
			var c ckRecord
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("checkpoint record %q: %w", k, err)
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

func (s *store) putPools(ts []poolTarget) error {
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyPools, b) })
}

func (s *store) pools() ([]poolTarget, error) {
	var out []poolTarget
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyPools)
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &out)
	})
	return out, err
}
