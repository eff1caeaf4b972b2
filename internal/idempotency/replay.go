package idempotency

import "crypto/sha256"

// ReplayMemory answers from memory the retries of completed keys this
// process replayed recently, with the answer the database would give, or
// declines, and the retry reads the database.
//
// NoReplayMemory is the reference: it remembers nothing, and every retry
// reads its key's row. finishedReplays (API_REPLAY_CACHE_TTL) keeps them
// for a while.
type ReplayMemory interface {
	// Remember keeps rec, a committed row just replayed; exact, if set, is
	// the digest of the request it answered (exactDigest).
	Remember(rec Record, exact *[sha256.Size]byte)
	// Replay answers req when its key is remembered and req is the request
	// the key was first used with.
	Replay(req Request, exact *[sha256.Size]byte) (Result, bool)
	// ReplayExact answers, before its body is decoded, a request whose
	// bytes are those of the one remembered.
	ReplayExact(tenantID, key string, exact *[sha256.Size]byte) (Result, bool)
	// Digests reports whether the memory reads a retry's exact digest:
	// without it, the body is read once, by its decoding.
	Digests() bool
}

// NoReplayMemory remembers nothing.
type NoReplayMemory struct{}

// Remember keeps nothing.
func (NoReplayMemory) Remember(Record, *[sha256.Size]byte) {}

// Replay declines: the retry reads its key's row.
func (NoReplayMemory) Replay(Request, *[sha256.Size]byte) (Result, bool) { return Result{}, false }

// ReplayExact declines: the retry is decoded.
func (NoReplayMemory) ReplayExact(string, string, *[sha256.Size]byte) (Result, bool) {
	return Result{}, false
}

// Digests is false: no retry's bytes are hashed.
func (NoReplayMemory) Digests() bool { return false }
