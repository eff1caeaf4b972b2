package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/postgres"
)

// Status is the state of a key. The names match the CHECK constraint on
// idempotency_keys.status.
type Status string

const (
	// StatusProcessing: the operation was accepted and its stored response
	// (typically 202) is replayed, but its asynchronous part has not finished.
	StatusProcessing Status = "processing"
	// StatusCompleted: the final response is stored and replayed forever
	// after, until the key expires.
	StatusCompleted Status = "completed"
	// StatusUnknown: the operation may or may not have taken effect
	// downstream. Nothing is replayed and nothing re-executes until
	// reconciliation settles it.
	StatusUnknown Status = "unknown"
	// StatusFailedRetryable: the operation provably never took effect
	// downstream, so the next request with the same key and fingerprint
	// re-acquires the key and resumes the same resource.
	StatusFailedRetryable Status = "failed_retryable"
	// StatusExpired: a tombstone. The key outlived its retention and its
	// stored response was dropped, but the row is kept so that a very late
	// retry is refused instead of running the operation a second time.
	StatusExpired Status = "expired"
)

// Kind is what the Store decided to do with a request.
type Kind int

const (
	// Execute: the key is new (or re-acquired): run the operation.
	Execute Kind = iota + 1
	// Replay: answer with the stored response.
	Replay
	// InProgress: another transaction holds the key past the lock wait.
	InProgress
	// Mismatch: the key was used for a different request.
	Mismatch
	// Unresolved: the key's outcome is unknown until reconciliation.
	Unresolved
	// Expired: the same request arrived after the key's retention. Nothing
	// runs and nothing is replayed; Record.ResourceID names what the
	// original request created.
	Expired
)

func (k Kind) String() string {
	switch k {
	case Execute:
		return "execute"
	case Replay:
		return "replay"
	case InProgress:
		return "in_progress"
	case Mismatch:
		return "mismatch"
	case Unresolved:
		return "unresolved"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Request identifies one attempt at an operation.
type Request struct {
	TenantID    string
	Key         string
	Method      string
	Path        string
	Fingerprint [32]byte
	// LockResource, if set, locks the row of the resource a key created
	// (SELECT ... FOR UPDATE) in tx. Callers that change a resource's
	// outcome lock the resource row before its key; Reserve calls this hook
	// before it re-acquires a failed_retryable key, so that it takes the two
	// locks in the same order and cannot deadlock with them. It runs under
	// the Store's lock wait.
	LockResource func(ctx context.Context, tx pgx.Tx, resourceID string) error
}

// Response is a stored HTTP answer.
type Response struct {
	StatusCode int
	// Header holds the headers a replay repeats (Location, Retry-After).
	Header map[string]string
	Body   []byte
}

// Record is a key's row.
type Record struct {
	TenantID    string
	Key         string
	Method      string
	Path        string
	Fingerprint []byte
	Status      Status
	// ResourceID is what the operation created, set by its Execute.
	ResourceID string
	// Response is nil until the operation's first answer is stored.
	Response  *Response
	LockedAt  time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	ExpiresAt time.Time
	// Expired is whether ExpiresAt had passed, by the database's clock, when
	// the row was read.
	Expired bool
}

// Decision is Reserve's answer. Record is the key's row as the decision saw
// it: the fresh reservation for Execute, the stored row otherwise (for
// Expired, without a response: it is never replayed).
type Decision struct {
	Kind   Kind
	Record Record
}

// Config tunes a Store. Zero values take the documented defaults.
type Config struct {
	// Retention is how long a finished key is kept and replayed; after it,
	// the key is a tombstone for TombstoneRetention: the same request is
	// refused (Expired), never run again. Defaults to 24h.
	Retention time.Duration
	// TombstoneRetention is how long Reap keeps a tombstone, counted from
	// when it made it; after it the key is deleted and free for a new
	// operation. Defaults to 30 days.
	TombstoneRetention time.Duration
	// LockWait is how long a request waits for a concurrent request that
	// holds the same key to commit before answering 409. Defaults to 2s.
	LockWait time.Duration
	// InProgressRetryAfter is the Retry-After sent with 409 in-progress
	// answers, and with 503 retry-needed when a waited-for operation ended
	// failed_retryable. Defaults to 1s.
	InProgressRetryAfter time.Duration
	// UnknownRetryAfter is the Retry-After sent while a key's outcome is
	// being reconciled. Defaults to 60s.
	UnknownRetryAfter time.Duration
	// Timeout bounds one Run, pool acquisition included, so a database
	// that stops answering yields a prompt 503, not a hung request.
	// Defaults to LockWait + 5s.
	Timeout time.Duration
	// Notifier wakes requests that wait for their key (Prefer: wait) as
	// soon as it leaves processing. Without one, they find out by polling.
	Notifier *Notifier
	// AwaitPoll is how often a waiting request re-reads its key when no
	// notification comes: the fallback for a lost notification or a
	// Notifier whose connection is down, and the only means without one.
	// Defaults to 1s.
	AwaitPoll time.Duration
	// MaxWaiters caps the requests of this Store (one per process) that
	// wait at once; beyond it a request is answered at once, as if it had
	// not asked to wait, rather than hold a goroutine and poll queries.
	// Defaults to 1000.
	MaxWaiters int
	// MaxWaitersPerTenant caps those of one tenant, so that one tenant's
	// waits cannot take every place and another tenant's wait still gets
	// one. Defaults to half of MaxWaiters (at least 1).
	MaxWaitersPerTenant int
	// Observe, if set, is told every decision an Endpoint makes, with the
	// tenant (for metrics). It must not block.
	Observe func(tenantID string, kind Kind)
	// Admit, if set, is asked before an operation runs under a new (or
	// re-acquired) key: inside the key's transaction, or just before a new
	// key's one-round-trip batch (see Endpoint.Fresh). An error refuses the
	// request: nothing is written, the key included, so a later request
	// with the same key runs. Replays, duplicates in progress and
	// mismatches are never refused by it (a refusal before the key is
	// reserved is asked again once it is), so tenant limits hung here count
	// only new operations, at no cost to the requests they let through. The
	// function it returns takes the admission back: it is called when the
	// operation turned out not to run (its key was taken, or its writes
	// failed).
	Admit func(ctx context.Context, a Admission) (undo func(), err error)
	// RecentKeys is how many keys an Endpoint remembers having reserved
	// or replayed, so that a retry of one is tried as a single read before
	// the transaction a new key needs (a new key pays nothing for this).
	// Defaults to 20000 (under 2 MB: at 1,000 new keys a second, the last
	// 20 seconds, when most retries come); negative disables it.
	RecentKeys int
	// ReplayCacheTTL is how long an Endpoint answers a retry of a completed
	// key from memory, with no database work, after it last answered one
	// from a committed row: a completed key's stored response never changes
	// before its retention ends, and a key within twice this of that end is
	// never cached (see finishedReplays). Defaults to 1m; negative disables.
	ReplayCacheTTL time.Duration
	// ReplayCacheSize bounds how many completed responses are kept for
	// ReplayCacheTTL. Defaults to 10000.
	ReplayCacheSize int
	// PlainNewKeys turns the one-round-trip new key off (Endpoint.Fresh):
	// every new key takes the transaction, its row reserved before the
	// operation's writes.
	PlainNewKeys bool
	// ObserveReap, if set, is told what each committed batch of Reap did
	// (for metrics), when it changed any row. It must not block.
	ObserveReap func(ReapResult)
}

// WithDefaults returns the configuration with zero values defaulted.
func (c Config) WithDefaults() Config {
	c.Retention = cmp.Or(c.Retention, 24*time.Hour)
	c.TombstoneRetention = cmp.Or(c.TombstoneRetention, 30*24*time.Hour)
	c.LockWait = cmp.Or(c.LockWait, 2*time.Second)
	c.InProgressRetryAfter = cmp.Or(c.InProgressRetryAfter, time.Second)
	c.UnknownRetryAfter = cmp.Or(c.UnknownRetryAfter, time.Minute)
	c.Timeout = cmp.Or(c.Timeout, c.LockWait+5*time.Second)
	c.AwaitPoll = cmp.Or(c.AwaitPoll, time.Second)
	c.MaxWaiters = cmp.Or(c.MaxWaiters, 1000)
	c.MaxWaitersPerTenant = cmp.Or(c.MaxWaitersPerTenant, max(c.MaxWaiters/2, 1))
	c.RecentKeys = cmp.Or(c.RecentKeys, 20000)
	c.ReplayCacheTTL = cmp.Or(c.ReplayCacheTTL, time.Minute)
	c.ReplayCacheSize = cmp.Or(c.ReplayCacheSize, 10000)
	return c
}

// Store reserves keys and stores responses in idempotency_keys.
type Store struct {
	cfg Config
	// places are the Prefer: wait places taken, in all and per tenant.
	places  waitPlaces
	recent  *recentKeys
	replays ReplayMemory
	// draining is closed by Drain: held waits end at once.
	draining  chan struct{}
	drainOnce sync.Once
}

// NewStore returns a Store.
func NewStore(cfg Config) *Store {
	cfg = cfg.WithDefaults()
	s := &Store{cfg: cfg, recent: newRecentKeys(cfg.RecentKeys), replays: NoReplayMemory{}, draining: make(chan struct{})}
	if fastpath.Built && cfg.ReplayCacheSize > 0 && cfg.ReplayCacheTTL > 0 {
		s.replays = newFinishedReplays(cfg.ReplayCacheSize, cfg.ReplayCacheTTL)
	}
	return s
}

// freshKeys is whether a new key may take the one round trip
// (Endpoint.Fresh), or only the transaction.
func (s *Store) freshKeys() bool { return fastpath.Built && !s.cfg.PlainNewKeys }

// Drain ends every wait held now or begun later (Prefer: wait) at once,
// with the key as it stands: a stopping server answers its waiting clients
// their 202 rather than holding them past its shutdown timeout. The
// operation goes on; the client's retry with the key learns its outcome.
func (s *Store) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// Config returns the Store's configuration, defaults applied.
func (s *Store) Config() Config { return s.cfg }

// ErrKeyNotFound is returned when a key has no row (never used, or reaped).
var ErrKeyNotFound = errors.New("idempotency key not found")

// ErrTransition is returned when a key is not in a state the requested
// transition starts from (completing an already completed key, say).
var ErrTransition = errors.New("idempotency key not in a state that allows this transition")

// Reserve decides what to do with req, inside tx. On Execute the caller owns
// the key until tx ends and must store an outcome with Save before it
// commits. It must be the first statement that can block in tx: it sets a
// transaction-local lock_timeout, and a lock timeout aborts tx, which the
// caller then rolls back (Run does this and answers InProgress).
//
// The reservation is one INSERT ... ON CONFLICT DO NOTHING: if another
// transaction inserted the same key and has not committed, Postgres makes
// this insert wait for it (up to lock_timeout) and then either inserts (the
// other rolled back) or returns nothing (it committed). There is no window
// between a check and an insert, and no unique violation to catch. The
// same statement reads the row when it was already there, so a replay
// costs one statement.
func (s *Store) Reserve(ctx context.Context, tx pgx.Tx, req Request) (Decision, error) {
	lockTimeout := postgres.LockTimeout(s.cfg.LockWait)
	// Bounded: each pass either decides or removes one expired row or loses
	// one re-acquisition race, after which the row is no longer retryable.
	for range 3 {
		rec, inserted, found, err := reserveKey(ctx, tx, req, s.cfg.Retention, lockTimeout)
		if isLockTimeout(err) {
			return Decision{}, fmt.Errorf("%w: %w", errKeyHeld, err)
		}
		if err != nil {
			return Decision{}, err
		}
		if inserted {
			return Decision{Kind: Execute, Record: rec}, nil
		}
		if !found {
			rec, err = getKey(ctx, tx, req.TenantID, req.Key)
			if errors.Is(err, ErrKeyNotFound) {
				continue // reaped since the insert: insert again
			}
			if err != nil {
				return Decision{}, err
			}
		}
		// A tombstone past its own retention is forgotten, whatever the new
		// request is: delete it and reserve afresh. Expiry is judged by the
		// database's clock, the one that set expires_at.
		if rec.Status == StatusExpired && rec.Expired {
			if err := deleteExpiredKey(ctx, tx, req.TenantID, req.Key); err != nil {
				return Decision{}, err
			}
			continue
		}
		if !sameRequest(rec, req) {
			return Decision{Kind: Mismatch, Record: rec}, nil
		}
		// A finished key past its retention is a tombstone, whether or not
		// the reaper has got to it yet: running the operation again would
		// be a second execution of a request the client already sent.
		if rec.Status == StatusExpired || (rec.Expired && (rec.Status == StatusCompleted || rec.Status == StatusFailedRetryable)) {
			// The stored response is past retention: never replay it.
			rec.Response = nil
			return Decision{Kind: Expired, Record: rec}, nil
		}
		switch rec.Status {
		case StatusProcessing, StatusCompleted:
			return Decision{Kind: Replay, Record: rec}, nil
		case StatusUnknown:
			return Decision{Kind: Unresolved, Record: rec}, nil
		case StatusFailedRetryable:
			if err := lockResource(ctx, tx, req, rec.ResourceID); err != nil {
				return Decision{}, err
			}
			rec, ok, err := reacquireKey(ctx, tx, req, s.cfg.Retention)
			if isLockTimeout(err) {
				return Decision{}, fmt.Errorf("%w: %w", errKeyHeld, err)
			}
			if err != nil {
				return Decision{}, err
			}
			if ok {
				return Decision{Kind: Execute, Record: rec}, nil
			}
			// Another request re-acquired it first; read its outcome.
		default:
			return Decision{}, fmt.Errorf("idempotency key in unexpected status %q", rec.Status)
		}
	}
	return Decision{Kind: InProgress}, nil
}

// lockResource takes the resource's lock through the caller's hook, the
// first half of the lock order (resource row, then key). Waiting too long
// for it means another transaction is settling the same operation: that is
// the key being in use, answered like a lock timeout on the key itself.
func lockResource(ctx context.Context, tx pgx.Tx, req Request, resourceID string) error {
	if req.LockResource == nil || resourceID == "" {
		return nil
	}
	err := req.LockResource(ctx, tx, resourceID)
	if isLockTimeout(err) {
		return fmt.Errorf("%w: lock resource %s: %w", errKeyHeld, resourceID, err)
	}
	if err != nil {
		return fmt.Errorf("lock resource %s: %w", resourceID, err)
	}
	return nil
}

func sameRequest(rec Record, req Request) bool {
	return rec.Method == req.Method && rec.Path == req.Path && bytes.Equal(rec.Fingerprint, req.Fingerprint[:])
}

// Outcome is what an operation reports back to the Store for the key.
type Outcome struct {
	// Status is StatusProcessing when asynchronous work remains (its
	// completion is recorded later with Complete), else StatusCompleted.
	Status Status
	// ResourceID names what the operation created.
	ResourceID string
	// Response is the answer to store and replay. A 5xx is never stored.
	Response Response
	// Writes, if set, are the operation's last statements, which Save sends
	// in one round trip with the stored response and, in Run's own
	// transaction, the COMMIT: for an operation that knows the rows it
	// writes without reading them back (stamped with Attempt.Now). A
	// statement's error in the server rolls everything back; a check made
	// in Go on its result would come after the commit, so a write that can
	// fail without an error (an UPDATE of no row) does not belong here.
	Writes *pgx.Batch
}

// Save records an Execute decision's outcome in tx.
func (s *Store) Save(ctx context.Context, tx pgx.Tx, req Request, out Outcome) error {
	if err := validOutcome(out); err != nil {
		return err
	}
	if out.Writes == nil {
		return transition(ctx, tx, req.TenantID, req.Key, []Status{StatusProcessing}, out.Status, out.ResourceID, &out.Response, s.cfg.Retention)
	}
	batch := out.Writes
	queueTransition(batch, req.TenantID, req.Key, []Status{StatusProcessing}, out.Status, out.ResourceID, &out.Response, s.cfg.Retention, true)
	// Nothing follows the outcome's writes in a key's transaction: in Run's
	// own, the commit goes with them.
	if err := postgres.SendAndCommit(ctx, tx, batch); err != nil {
		return fmt.Errorf("save outcome: %w", err)
	}
	return nil
}

// validOutcome refuses what a key never stores.
func validOutcome(out Outcome) error {
	if out.Response.StatusCode >= 500 || out.Response.StatusCode < 200 {
		return fmt.Errorf("refusing to store a %d response", out.Response.StatusCode)
	}
	if out.Status != StatusProcessing && out.Status != StatusCompleted {
		return fmt.Errorf("an operation's outcome must be processing or completed, not %q", out.Status)
	}
	return nil
}

// Complete records the final response of an operation whose key is
// processing (or unknown, when reconciliation settles it). Call it in the
// same transaction as the resource's own final state.
func (s *Store) Complete(ctx context.Context, tx pgx.Tx, tenantID, key string, resp Response) error {
	if resp.StatusCode >= 500 || resp.StatusCode < 200 {
		return fmt.Errorf("refusing to store a %d response", resp.StatusCode)
	}
	return transition(ctx, tx, tenantID, key, []Status{StatusProcessing, StatusUnknown}, StatusCompleted, "", &resp, s.cfg.Retention)
}

// MarkUnknown records that a processing operation's outcome cannot be
// determined: retries get 409 until reconciliation completes the key.
func (s *Store) MarkUnknown(ctx context.Context, tx pgx.Tx, tenantID, key string) error {
	return transition(ctx, tx, tenantID, key, []Status{StatusProcessing}, StatusUnknown, "", nil, s.cfg.Retention)
}

// MarkFailedRetryable records that a processing (or unknown) operation
// provably had no downstream effect, so a retry may re-acquire the key.
func (s *Store) MarkFailedRetryable(ctx context.Context, tx pgx.Tx, tenantID, key string) error {
	return transition(ctx, tx, tenantID, key, []Status{StatusProcessing, StatusUnknown}, StatusFailedRetryable, "", nil, s.cfg.Retention)
}

// Get reads a key's row.
func (s *Store) Get(ctx context.Context, db Querier, tenantID, key string) (Record, error) {
	return getKey(ctx, db, tenantID, key)
}

// Querier runs queries: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// TxBeginner starts transactions: a pool or a connection.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Attempt tells an operation whether it starts fresh or resumes.
type Attempt struct {
	// Request is the request that holds the key.
	Request Request
	// ResourceID is empty on a new key, and names the resource created by
	// the earlier attempt when a failed_retryable key was re-acquired: the
	// operation must resume that resource, not create another.
	ResourceID string
	// Now is the transaction's now(), as the database stamped the key: rows
	// the operation stamps with it read exactly as if the database had
	// stamped them itself.
	Now time.Time
}

// Operation does an endpoint's writes inside the Store's transaction. A
// returned error rolls everything back, the key's reservation included.
type Operation func(ctx context.Context, tx pgx.Tx, attempt Attempt) (Outcome, error)

// Result is Run's answer.
type Result struct {
	Kind Kind
	// Record is the key's row after Run (for Execute, as committed).
	Record Record
	// Replayed is true when Record.Response is a stored answer to an
	// earlier request rather than this request's.
	Replayed bool
}

// Run reserves req's key and, on Execute, runs op and saves its outcome,
// all in one transaction: the key, the operation's writes and the stored
// response commit together or not at all.
func (s *Store) Run(ctx context.Context, db TxBeginner, req Request, op Operation) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var res Result
	// admitted takes back an admission whose operation did not commit.
	admitted := func() {}
	run := func(tx pgx.Tx) error {
		dec, err := s.Reserve(ctx, tx, req)
		if err != nil {
			return err
		}
		res = Result{Kind: dec.Kind, Record: dec.Record, Replayed: dec.Kind == Replay}
		if dec.Kind != Execute {
			return nil
		}
		if s.cfg.Admit != nil {
			undo, err := s.cfg.Admit(ctx, Admission{TenantID: req.TenantID, DB: tx, Reserved: true})
			if err != nil {
				return err
			}
			admitted = undo
		}
		out, err := op(ctx, tx, Attempt{Request: req, ResourceID: dec.Record.ResourceID, Now: dec.Record.UpdatedAt})
		if err != nil {
			return err
		}
		if err := s.Save(ctx, tx, req, out); err != nil {
			return err
		}
		res.Record.Status = out.Status
		res.Record.ResourceID = out.ResourceID
		res.Record.Response = &out.Response
		return nil
	}
	// Read committed is required, whatever the server's default: after a
	// conflicting insert, the next statement must see the row the other
	// transaction committed. On a pool the transaction is pipelined: a new
	// key's BEGIN goes with its reservation, and its COMMIT with the
	// outcome's writes (Save).
	var err error
	if pool, ok := db.(postgres.Acquirer); ok {
		err = postgres.InTx(ctx, pool, run)
	} else {
		err = pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, run)
	}
	if err != nil {
		admitted()
	}
	if errors.Is(err, errKeyHeld) {
		return Result{Kind: InProgress}, nil
	}
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// errKeyHeld marks a lock timeout while waiting for another transaction's
// hold on the key itself. A lock timeout later in the transaction (the
// operation's own writes) is not the key being in use; it stays an error.
var errKeyHeld = errors.New("idempotency key held by another transaction")

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// Await waits until the key leaves StatusProcessing or until passes, and
// returns the last row read. It serves Prefer: wait. It is woken by the
// Config.Notifier when the key is finished and re-reads the key every
// Config.AwaitPoll in case a notification was lost. Beyond
// Config.MaxWaiters concurrent calls it does not wait: it returns the row
// as it is.
func (s *Store) Await(ctx context.Context, db Querier, tenantID, key string, until time.Time) (Record, error) {
	read := func() (Record, error) {
		readCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		return getKey(readCtx, db, tenantID, key)
	}
	select {
	case <-s.draining:
		return read()
	default:
	}
	if !s.places.take(tenantID, s.cfg.MaxWaiters, s.cfg.MaxWaitersPerTenant) {
		return read()
	}
	defer s.places.give(tenantID)
	var wake <-chan struct{}
	if s.cfg.Notifier != nil {
		// Subscribed before the first read, so that a key finished between
		// that read and the wait still wakes this call.
		ch, unsubscribe := s.cfg.Notifier.subscribe(tenantID, key)
		defer unsubscribe()
		wake = ch
		// Then marked, so the move out of processing notifies; a key moved
		// before the mark committed is seen by the first read. Without the
		// mark the wait still ends, by the poll.
		markCtx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		err := markAwaited(markCtx, db, tenantID, key)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.cfg.Notifier.cfg.Logger.WarnContext(ctx, "waiting without notification", slog.Any("error", err))
		}
	}
	for {
		rec, err := read()
		if err != nil || rec.Status != StatusProcessing {
			return rec, err
		}
		wait := min(s.cfg.AwaitPoll, time.Until(until))
		if wait <= 0 {
			return rec, nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return rec, nil
		case <-s.draining:
			timer.Stop()
			return read()
		case <-wake:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// waitPlaces counts the requests waiting (Prefer: wait), in all and per
// tenant.
type waitPlaces struct {
	mu       sync.Mutex
	total    int
	byTenant map[string]int
}

// take gives tenant a place unless every place, or the tenant's share, is
// taken.
func (w *waitPlaces) take(tenantID string, limit, perTenant int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.total >= limit || w.byTenant[tenantID] >= perTenant {
		return false
	}
	if w.byTenant == nil {
		w.byTenant = map[string]int{}
	}
	w.total++
	w.byTenant[tenantID]++
	return true
}

// give returns tenant's place.
func (w *waitPlaces) give(tenantID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total--
	if w.byTenant[tenantID]--; w.byTenant[tenantID] == 0 {
		delete(w.byTenant, tenantID)
	}
}
