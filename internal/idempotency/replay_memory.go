package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// finishedReplays keeps the stored responses of completed keys that this
// process answered from a committed row, for the Store's ReplayCacheTTL,
// so that further retries of one are answered with no database work at all
// (a client retrying in a loop, a retry storm after a timeout).
//
// Serving them from memory gives the answer the database would. A completed
// key is final: transitions move keys into completed, none out of it, and
// its response is written once. The only change left to it is the reaper's
// tombstone once its retention has ended, and a key whose retention ends
// within twice the TTL is not cached, so a cached answer is always given
// before that end (the clocks of this process and the database would have
// to disagree by more than the TTL for it not to be). A matching fingerprint
// is still required; anything else takes the database path. An entry lives
// for the TTL after the read that cached it, however often it is served, so
// even a row changed by hand, outside the service, is seen within the TTL.
type finishedReplays struct {
	ttl  time.Duration
	size int
	// The cache is made by the first remember: an expirable LRU runs a
	// goroutine for the life of the process, which a Store that never
	// replays (the worker's) need not have.
	made  sync.Once
	cache atomic.Pointer[expirable.LRU[replayKey, *finishedReplay]]
}

type replayKey struct{ tenantID, key string }

// finishedReplay is a completed key's row and the digest (exactDigest) of
// the last request answered with it that was decoded and found to be the
// key's own: a later retry with the same bytes is that same request, and
// is answered without being decoded again.
type finishedReplay struct {
	rec   Record
	exact atomic.Pointer[[sha256.Size]byte]
}

// maxCachedReplayBody keeps unusually large responses out of memory: a
// payment's is under a kilobyte.
const maxCachedReplayBody = 16 << 10

func newFinishedReplays(size int, ttl time.Duration) *finishedReplays {
	return &finishedReplays{ttl: ttl, size: size}
}

// Digests: a retry's bytes are hashed, to be answered before decoding.
func (f *finishedReplays) Digests() bool { return true }

// Remember caches rec, a committed row just replayed, if it is final and
// far enough from the end of its retention; exact, if set, is the digest
// of the request it answered (exactDigest).
func (f *finishedReplays) Remember(rec Record, exact *[sha256.Size]byte) {
	if rec.Status != StatusCompleted || rec.Expired || rec.Response == nil ||
		len(rec.Response.Body) > maxCachedReplayBody || time.Until(rec.ExpiresAt) < 2*f.ttl {
		return
	}
	f.made.Do(func() { f.cache.Store(expirable.NewLRU[replayKey, *finishedReplay](f.size, nil, f.ttl)) })
	cached := &finishedReplay{rec: rec}
	cached.exact.Store(exact)
	f.cache.Load().Add(replayKey{rec.TenantID, rec.Key}, cached)
}

// Replay answers req from memory when its key's completed response is
// cached and req is the request that key was first used with; exact, if
// set, is req's digest, kept for ReplayExact.
func (f *finishedReplays) Replay(req Request, exact *[sha256.Size]byte) (Result, bool) {
	cached, ok := f.get(req.TenantID, req.Key)
	if !ok || !sameRequest(cached.rec, req) {
		return Result{}, false
	}
	if exact != nil {
		cached.exact.Store(exact)
	}
	return Result{Kind: Replay, Record: cached.rec, Replayed: true}, true
}

// ReplayExact answers a request from memory, before its body is decoded,
// when its bytes are those of the request whose read cached the answer.
func (f *finishedReplays) ReplayExact(tenantID, key string, exact *[sha256.Size]byte) (Result, bool) {
	if exact == nil {
		return Result{}, false
	}
	cached, ok := f.get(tenantID, key)
	if !ok {
		return Result{}, false
	}
	if known := cached.exact.Load(); known == nil || *known != *exact {
		return Result{}, false
	}
	return Result{Kind: Replay, Record: cached.rec, Replayed: true}, true
}

func (f *finishedReplays) get(tenantID, key string) (*finishedReplay, bool) {
	if f.cache.Load() == nil {
		return nil, false
	}
	return f.cache.Load().Get(replayKey{tenantID, key})
}

// exactDigest reads r's body, gives it back to r unread, and returns the
// digest of everything that decides what the request means: its method,
// path, content type and coding, and body bytes. Two requests of one
// tenant and key with the same digest decode to the same request. It
// returns nil, and leaves r as if untouched, for a body over
// maxCachedReplayBody or one that could not be read: decoding says why.
func exactDigest(r *http.Request) *[sha256.Size]byte {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCachedReplayBody+1))
	rest := io.Reader(r.Body)
	if err != nil {
		rest = failingReader{err}
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), r.Body}
	if err != nil || len(body) > maxCachedReplayBody {
		return nil
	}
	h := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path, r.Header.Get("Content-Type"), strings.Join(r.Header.Values("Content-Encoding"), ",")} {
		_, _ = h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		_, _ = io.WriteString(h, part)
	}
	_, _ = h.Write(body)
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	return &digest
}

// failingReader gives back a read error after the bytes read before it.
type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }
