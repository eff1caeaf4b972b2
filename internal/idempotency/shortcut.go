package idempotency

import (
	"context"
	"hash/maphash"

	lru "github.com/hashicorp/golang-lru/v2"
)

// recentKeys remembers, by hash, the keys this process has recently
// reserved or replayed: the requests most likely to be retried. It is a hint
// that decides which path a request tries first, never what it is answered:
// a key it forgets, or one another process reserved, takes the full path.
type recentKeys struct {
	seed  maphash.Seed
	cache *lru.Cache[uint64, struct{}]
}

func newRecentKeys(size int) *recentKeys {
	if size <= 0 {
		return nil
	}
	cache, err := lru.New[uint64, struct{}](size)
	if err != nil {
		return nil // only for a size <= 0, excluded above
	}
	return &recentKeys{seed: maphash.MakeSeed(), cache: cache}
}

func (r *recentKeys) hash(tenantID, key string) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(tenantID)
	h.WriteByte(0)
	h.WriteString(key)
	return h.Sum64()
}

func (r *recentKeys) add(tenantID, key string) {
	if r != nil {
		r.cache.Add(r.hash(tenantID, key), struct{}{})
	}
}

func (r *recentKeys) seen(tenantID, key string) bool {
	return r != nil && r.cache.Contains(r.hash(tenantID, key))
}

// replayCommitted answers a retry of a recently seen key with one read,
// without a transaction, when that is the answer the transaction would
// give: the read sees only committed rows, and a committed row with the
// same request, processing or completed and within its retention, is
// replayed by Reserve too (its insert conflicts, and neither state ever
// turns back into one that executes). Anything else, a row not yet
// committed included, takes the full path, where the insert waits for the
// transaction that holds the key or answers 409. A row that changes just
// after the read is answered as it was when read, as Reserve would have a
// moment earlier.
func (s *Store) replayCommitted(ctx context.Context, db Querier, req Request) (Result, bool) {
	if !s.recent.seen(req.TenantID, req.Key) {
		return Result{}, false
	}
	return s.replayRow(ctx, db, req)
}

// replayRow is replayCommitted's read, for any key known to exist.
func (s *Store) replayRow(ctx context.Context, db Querier, req Request) (Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	rec, err := getKey(ctx, db, req.TenantID, req.Key)
	if err != nil || rec.Expired || rec.Response == nil || !sameRequest(rec, req) ||
		(rec.Status != StatusProcessing && rec.Status != StatusCompleted) {
		return Result{}, false
	}
	return Result{Kind: Replay, Record: rec, Replayed: true}, true
}
