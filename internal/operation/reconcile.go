package operation

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// ReconcileConfig tunes a kind's reconciler. Zero values take the defaults.
type ReconcileConfig struct {
	// Batch is how many due operations one pass claims. Defaults to 50.
	Batch int
	// RunBudget bounds one run (one periodic job): it stops claiming
	// operations when the budget is spent. Defaults to 2m.
	RunBudget time.Duration
	// Lease is how far a claimed operation's next look is pushed while a
	// run works on it, so two runs never work the same operation. Must
	// exceed RunBudget. Defaults to RunBudget + 1m.
	Lease time.Duration
	// CallTimeout bounds one provider call. Defaults to 20s.
	CallTimeout time.Duration
	// Settle is how long after the last request can have ended (its
	// attempt's deadline, stamped on the row) before "the provider has no
	// such object" counts as proof: time for a request still inside the
	// provider to commit. Defaults to 1m.
	Settle time.Duration
	// ClockSkew widens a window listed at the provider on both sides, for
	// the difference between the database's clock and the provider's.
	// Defaults to 5m.
	ClockSkew time.Duration
	// RetryBase and RetryMax shape the backoff between looks that could not
	// tell. Default 15s and 1h.
	RetryBase, RetryMax time.Duration
	// MaxAttempts is how many looks that could not tell are made before the
	// operation is left to an operator. Defaults to 40 (about a day with
	// the default backoff).
	MaxAttempts int
	// PollInterval is the wait between looks at an operation still pending
	// at the provider. Defaults to 30s.
	PollInterval time.Duration
	// MaxActionWait is how long after the first request an operation
	// waiting for the customer (3-D Secure) is canceled. Defaults to 1h.
	MaxActionWait time.Duration
}

// WithDefaults returns the configuration with zero values defaulted.
func (c ReconcileConfig) WithDefaults() ReconcileConfig {
	c.Batch = cmp.Or(c.Batch, 50)
	c.RunBudget = cmp.Or(c.RunBudget, 2*time.Minute)
	c.Lease = cmp.Or(c.Lease, c.RunBudget+time.Minute)
	c.CallTimeout = cmp.Or(c.CallTimeout, 20*time.Second)
	c.Settle = cmp.Or(c.Settle, time.Minute)
	c.ClockSkew = cmp.Or(c.ClockSkew, 5*time.Minute)
	c.RetryBase = cmp.Or(c.RetryBase, 15*time.Second)
	c.RetryMax = cmp.Or(c.RetryMax, time.Hour)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 40)
	c.PollInterval = cmp.Or(c.PollInterval, 30*time.Second)
	c.MaxActionWait = cmp.Or(c.MaxActionWait, time.Hour)
	return c
}

// found is what a look at the provider found.
type found int

const (
	// undetermined: the look could not tell (an error, an incomplete
	// list, a window not yet settled, several candidates).
	undetermined found = iota
	// Final: the provider has the operation and its outcome is final.
	Final
	// Pending: the provider has the operation, not yet final.
	Pending
	// Absent: proven never created for this generation.
	Absent
)

// Look is what one look at the provider concluded.
type Look struct {
	Found found
	// ProviderID is the provider's object, when one was found; the next
	// look reads it directly.
	ProviderID string
	// Note says why an undetermined look could not tell.
	Note string
	Err  error
}

// Looked is the look that an answer read from the provider makes: final
// or pending, with its object; otherwise nothing can be told, and note
// says why.
func Looked(read providerAnswer, note string) Look {
	j := read.Judge()
	switch j.Kind {
	case provider.Succeeded, provider.Declined:
		return Look{Found: Final, ProviderID: j.ObjectID}
	case provider.Pending:
		return Look{Found: Pending, ProviderID: j.ObjectID}
	}
	return Look{ProviderID: j.ObjectID, Note: note, Err: j.Err}
}

// Entry is what the engine reads of every claimed operation.
type Entry struct {
	TenantID, ID, IdempotencyKey string
	// Status is the operation's status as it was read.
	Status     string
	Generation int
	// FirstAttemptAt is when the first provider request of this generation
	// was about to be sent; nil means none ever was.
	FirstAttemptAt *time.Time
	// LastAttemptAt is when the latest was, by the same clock.
	LastAttemptAt     *time.Time
	ReconcileAttempts int
	// KeySpentAt is when the provider was seen to hold an answer under
	// ProviderKey that no retry of it can move past: a stored error it
	// replays, or the key held for other parameters. Until then a resumed
	// operation keeps its key (Table.NextProviderKey).
	KeySpentAt *time.Time
	// LogAttrs name the operation on log lines, beside its id.
	LogAttrs []any
	// ParentID is the operation's parent (Table.Parent), whose row its
	// kind locks first; "" for a kind with none.
	ParentID string
	// Account is the connected account the operation acts on ("" the
	// platform's), and ProviderID its provider object, nil until known.
	Account    string
	ProviderID *string
	// Ref is the operation's identity at the provider that survives the
	// loss of its rows (requestRef); "" for an operation made before refs were.
	Ref string
	// ProviderKey is the provider key of its current generation.
	ProviderKey string
}

// Under is e with parentID as its parent.
func (e Entry) Under(parentID string) Entry {
	e.ParentID = parentID
	return e
}

// LookUp is how a kind asks the provider what became of one of its
// operations, claimed by the reconciler, never sending it again. settled
// says whether no request for it can still be in flight (its last
// attempt's deadline passed by the settle time), without which no answer
// proves the provider never made it. ctx carries the call's deadline.
type LookUp[Op, O any] func(ctx context.Context, op Op, settled bool) (O, Look)

// claim is an operation as the reconciler claims it: the kind's row, and
// whether it has settled (ClaimColumns reads both).
type claim[Op any] struct {
	op      Op
	settled bool
}

// claimRow scans a claim: the kind's columns into Op by name, the last,
// settled, beside it.
func claimRow[Op any](row pgx.CollectableRow) (claim[Op], error) {
	var c claim[Op]
	op, err := pgx.RowToStructByName[Op](lastApart{row, &c.settled})
	c.op = op
	return c, err
}

// lastApart is a row without its last column, which Scan writes to last.
type lastApart struct {
	pgx.CollectableRow
	last any
}

func (r lastApart) FieldDescriptions() []pgconn.FieldDescription {
	all := r.CollectableRow.FieldDescriptions()
	return all[:len(all)-1]
}

func (r lastApart) Scan(dest ...any) error { return r.CollectableRow.Scan(append(dest, r.last)...) }

// settledColumn computes, by the database's clock (the one that stamped
// the attempt), whether no request can still be in flight nor uncommitted
// inside the provider: the last attempt's deadline, as the worker that made
// it stamped it (stampAttempt), has passed by the settle time that param
// holds in microseconds. It reads the bound from the row, never from the
// timeouts configured where it runs: an operator's shell may not have the
// worker's. An attempt stamped before deadlines were is bounded by the
// longest call a worker can be configured for.
func settledColumn(param int) string {
	return fmt.Sprintf(`(last_provider_attempt_at IS NULL OR
		coalesce(provider_attempt_deadline, last_provider_attempt_at + %d * interval '1 microsecond')
			+ $%d * interval '1 microsecond' <= now()) AS settled`, MaxJobTimeout.Microseconds(), param)
}

// MaxJobTimeout is the longest a worker's attempt, and so its provider
// call, can be configured to take (WORKER_JOB_TIMEOUT).
const MaxJobTimeout = 10 * time.Minute

// stampAttempt is the SET list that starts a provider attempt, before its
// call and committed on its own: when the provider was first and last
// called for the operation's current generation, and when this call gives
// up at the latest (now plus the call timeout that param holds in
// microseconds), so that whoever later proves that nothing is in flight
// reads the bound from the row. Both only move later (greatest ignores
// the NULL of a generation not yet attempted): a start that commits after
// another, yet began before it (a delayed group, after its attempt started
// alone), or a worker with a shorter call timeout, never shortens the
// window in which the provider may still act.
func stampAttempt(param int) string {
	return fmt.Sprintf(`first_provider_attempt_at = coalesce(first_provider_attempt_at, now()),
			last_provider_attempt_at = greatest(last_provider_attempt_at, now()),
			provider_attempt_deadline = greatest(provider_attempt_deadline, now() + $%d * interval '1 microsecond')`, param)
}

// reconciler settles operations in requires_reconciliation by looking them
// up at the provider, never by sending them again:
//
//   - found and final: recorded exactly as the worker would (operation, then
//     key completed with the final response, one transaction);
//   - found and pending: looked at again after PollInterval, not counted;
//   - proven never created (no request ever sent, or absent from a complete
//     answer once the last request's window has settled): failed with
//     FailureProviderNotReached and the key made failed_retryable, so the
//     client's retry with the same key runs it under the next generation;
//   - anything else: looked at again with backoff, and after MaxAttempts
//     left to an operator (reconcile_after NULL).
type reconciler[Op, O any] struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	logger *slog.Logger
	cfg    ReconcileConfig
	table  Table
	// kind locks and records as the kind's worker does; look asks the
	// provider.
	kind Attemptable[Op, O]
	look LookUp[Op, O]
}

// newReconciler returns a reconciler of the operations in table, which
// records what look finds as kind's worker records an answer.
func newReconciler[Op, O any](pool *pgxpool.Pool, keys *idempotency.Store, logger *slog.Logger, cfg ReconcileConfig, table Table,
	kind Attemptable[Op, O], look LookUp[Op, O]) *reconciler[Op, O] {
	return &reconciler[Op, O]{pool: pool, keys: keys, logger: logger, cfg: cfg.WithDefaults(), table: table, kind: kind, look: look}
}

// Config is the reconciler's configuration, defaults applied.
func (r *reconciler[Op, O]) Config() ReconcileConfig { return r.cfg }

// ReconcileResult counts what a run did.
type ReconcileResult struct {
	Settled, NotReached, Pending, Undetermined, LeftToOperator int
	// Failed counts operations whose look or recording failed (a database
	// error): their lease runs out and a later run looks again.
	Failed int
}

// Verdict names what a run of one operation concluded: settled,
// not_reached, pending, left_to_operator or undetermined.
func (r ReconcileResult) Verdict() string {
	switch {
	case r.Settled > 0:
		return "settled"
	case r.NotReached > 0:
		return "not_reached"
	case r.Pending > 0:
		return "pending"
	case r.LeftToOperator > 0:
		return "left_to_operator"
	}
	return "undetermined"
}

func (r ReconcileResult) looked() int {
	return r.Settled + r.NotReached + r.Pending + r.Undetermined + r.LeftToOperator + r.Failed
}

// Run settles the operations that are due, until none is or the run
// budget is spent.
func (r *reconciler[Op, O]) Run(ctx context.Context) (ReconcileResult, error) {
	var res ReconcileResult
	deadline := time.Now().Add(r.cfg.RunBudget)
	for time.Now().Before(deadline) {
		rows, err := r.pool.Query(ctx, `
			UPDATE `+r.table.Name+` SET reconcile_after = now() + $2 * interval '1 microsecond'
			WHERE id IN (
				SELECT id FROM `+r.table.Name+`
				WHERE status = '`+inReconciliation+`' AND reconcile_after <= now()`+r.table.scoped()+`
				ORDER BY reconcile_after
				LIMIT $1
				FOR UPDATE SKIP LOCKED)
			RETURNING `+r.table.ClaimColumns(3),
			r.cfg.Batch, r.cfg.Lease.Microseconds(), r.cfg.Settle.Microseconds())
		claimed, err := r.collect(rows, err)
		if err != nil {
			return res, err
		}
		for _, c := range claimed {
			if err := r.reconcile(ctx, c, &res); err != nil {
				res.Failed++
				r.logger.ErrorContext(ctx, "reconciling "+r.table.Operation+" failed",
					slog.String(r.table.Operation+"_id", r.kind.Entry(c.op).ID), slog.Any("error", err))
			}
		}
		if len(claimed) < r.cfg.Batch {
			break
		}
	}
	return res, nil
}

// ReconcileNow reconciles one operation at once, whatever its schedule (an
// operator's request, or a test). It claims the operation like a run does.
func (r *reconciler[Op, O]) ReconcileNow(ctx context.Context, tenantID, id string) (ReconcileResult, error) {
	var res ReconcileResult
	rows, err := r.pool.Query(ctx, `
		UPDATE `+r.table.Name+` SET reconcile_after = now() + $3 * interval '1 microsecond'
		WHERE tenant_id = $1 AND id = $2 AND status = '`+inReconciliation+`'
		RETURNING `+r.table.ClaimColumns(4),
		tenantID, id, r.cfg.Lease.Microseconds(), r.cfg.Settle.Microseconds())
	claimed, err := r.collect(rows, err)
	if err != nil {
		return res, err
	}
	if len(claimed) == 0 {
		return res, fmt.Errorf("reconcile %s %s: none awaiting reconciliation: %w", r.table.Operation, id, r.table.NotFound)
	}
	return res, r.reconcile(ctx, claimed[0], &res)
}

// awaiting reads an operation awaiting reconciliation, as a claim would
// return it, without claiming it: an operator's look that changes nothing
// leaves the schedule as it was. ok is false when it is not awaiting.
func (r *reconciler[Op, O]) awaiting(ctx context.Context, tenantID, id string) (c claim[Op], ok bool, err error) {
	rows, err := r.pool.Query(ctx, `
		SELECT `+r.table.ClaimColumns(3)+`
		FROM `+r.table.Name+` WHERE tenant_id = $1 AND id = $2 AND status = '`+inReconciliation+`'`,
		tenantID, id, r.cfg.Settle.Microseconds())
	claimed, err := r.collect(rows, err)
	if err != nil || len(claimed) == 0 {
		return c, false, err
	}
	return claimed[0], true, nil
}

func (r *reconciler[Op, O]) collect(rows pgx.Rows, err error) ([]claim[Op], error) {
	if err != nil {
		return nil, fmt.Errorf("claim %ss to reconcile: %w", r.table.Operation, err)
	}
	claims, err := pgx.CollectRows(rows, claimRow[Op])
	if err != nil {
		return nil, fmt.Errorf("claim %ss to reconcile: %w", r.table.Operation, err)
	}
	return claims, nil
}

func (r *reconciler[Op, O]) reconcile(ctx context.Context, c claim[Op], res *ReconcileResult) error {
	e := r.kind.Entry(c.op)
	log := r.logger.With(append([]any{slog.String("tenant_id", e.TenantID), slog.String(r.table.Operation+"_id", e.ID)},
		append(e.LogAttrs, slog.Int("generation", e.Generation), slog.Int("reconcile_attempt", e.ReconcileAttempts+1))...)...)
	if e.FirstAttemptAt == nil {
		// The attempt clock commits before any provider request is sent:
		// without it, no request for this generation ever left. A failover
		// that lost the clock's commit is answered where it can be: the
		// worker that stamped it writes it back when it hands over
		// (attemptClock). Only an operation whose worker died in that same
		// call, and whose job then ran out of attempts, reaches here from
		// the sweeper without it; the client's retry keeps the provider key
		// and meets the provider's object, and the ledger check names it.
		log.InfoContext(ctx, "no provider request was ever sent for this "+r.table.Operation)
		res.NotReached++
		return r.RecordNotReached(ctx, e)
	}

	out, look := r.lookUp(ctx, c)
	log = log.With(slog.String("found", look.Found.String()), slog.String(r.table.ProviderIDLog, look.ProviderID))
	switch look.Found {
	case Final:
		log.InfoContext(ctx, "reconciled: the provider's outcome is final")
		res.Settled++
		return r.recordFinal(ctx, c, out, true)
	case Pending:
		log.InfoContext(ctx, r.table.Operation+" still pending at the provider; looking again later")
		// Pending is not a failed look: it does not count toward MaxAttempts.
		res.Pending++
		return r.reschedule(ctx, e, nextLook{providerID: look.ProviderID, after: r.cfg.PollInterval})
	case Absent:
		log.InfoContext(ctx, "reconciled: the provider never created this "+r.table.Operation)
		res.NotReached++
		return r.RecordNotReached(ctx, e)
	}
	if e.ReconcileAttempts+1 >= r.cfg.MaxAttempts {
		log.ErrorContext(ctx, "reconciliation could not tell; leaving the "+r.table.Operation+" to an operator",
			slog.String("note", look.Note), slog.Any("error", look.Err))
		res.LeftToOperator++
		return r.reschedule(ctx, e, nextLook{providerID: look.ProviderID, counted: true,
			operatorNote: "reconciliation could not determine the outcome: " + look.Note + "; an operator must check the provider"})
	}
	delay := backoff(r.cfg.RetryBase, r.cfg.RetryMax, e.ReconcileAttempts)
	log.WarnContext(ctx, "reconciliation could not tell yet; looking again later", slog.String("note", look.Note),
		slog.Duration("delay", delay), slog.Any("error", look.Err))
	res.Undetermined++
	return r.reschedule(ctx, e, nextLook{providerID: look.ProviderID, after: delay, counted: true})
}

// recordFinal records out, a final outcome found at the provider, under
// the kind's locks. byReconciler, for the reconciler's own look (not an
// operator's release), also notes that the reconciler settled it, if it
// is this transaction that moves the operation out of reconciliation: the
// locks, taken before it is read, keep an event's settlement from coming
// between.
func (r *reconciler[Op, O]) recordFinal(ctx context.Context, c claim[Op], out O, byReconciler bool) error {
	e := r.kind.Entry(c.op)
	return postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.kind.Lock(ctx, tx, e.TenantID, e.ID); err != nil {
			return err
		}
		awaiting := false
		if byReconciler {
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+r.table.Name+`
				WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = '`+inReconciliation+`')`,
				e.TenantID, e.ID, e.Generation).Scan(&awaiting)
			if err != nil {
				return fmt.Errorf("read %s %s: %w", r.table.Operation, e.ID, err)
			}
		}
		if err := r.kind.RecordFinal(ctx, tx, c.op, out); err != nil || !awaiting {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+r.table.Name+` SET reconciled_at = now()
			WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status <> '`+inReconciliation+`'`,
			e.TenantID, e.ID, e.Generation)
		if err != nil {
			return fmt.Errorf("note %s %s reconciled: %w", r.table.Operation, e.ID, err)
		}
		return nil
	})
}

// lookUp asks the provider about c, within the configured call timeout.
func (r *reconciler[Op, O]) lookUp(ctx context.Context, c claim[Op]) (O, Look) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	return r.look(ctx, c.op, c.settled)
}

func (f found) String() string {
	switch f {
	case Final:
		return "final"
	case Pending:
		return "pending"
	case Absent:
		return "absent"
	}
	return "undetermined"
}

// RecordNotReached fails an operation proven never to have reached the
// provider and makes its key retryable, under the kind's locks; an
// operation settled meanwhile is left alone.
func (r *reconciler[Op, O]) RecordNotReached(ctx context.Context, e Entry) error {
	return postgres.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		_, err := r.recordNotReachedTx(ctx, tx, e, nil)
		return err
	})
}

// recordNotReachedTx is RecordNotReached in the caller's transaction; it
// reports whether the operation changed. freeKey, if set, moves the key
// from unknown to failed_retryable in place of the reconciler's own
// transition (an operator's release records who and why).
func (r *reconciler[Op, O]) recordNotReachedTx(ctx context.Context, tx pgx.Tx, e Entry, freeKey func(context.Context, pgx.Tx) error) (bool, error) {
	if err := r.kind.Lock(ctx, tx, e.TenantID, e.ID); err != nil {
		return false, err
	}
	changed, err := r.table.failNotReached(ctx, tx, e, freeKey == nil)
	if err != nil || !changed {
		return false, err // or settled meanwhile
	}
	if freeKey != nil {
		return true, freeKey(ctx, tx)
	}
	if err := r.keys.MarkFailedRetryable(ctx, tx, e.TenantID, e.IdempotencyKey); err != nil {
		return false, fmt.Errorf("make idempotency key retryable: %w", err)
	}
	return true, nil
}

// nextLook is when and how the reconciler looks at an operation again.
type nextLook struct {
	// providerID, if found, is remembered so the next look reads it
	// directly.
	providerID string
	after      time.Duration
	// counted is whether this look counts toward MaxAttempts.
	counted bool
	// operatorNote, when set, stops the schedule and tells an operator why.
	operatorNote string
}

func (r *reconciler[Op, O]) reschedule(ctx context.Context, e Entry, next nextLook) error {
	counted := 0
	if next.counted {
		counted = 1
	}
	_, err := r.pool.Exec(ctx, `
		UPDATE `+r.table.Name+` SET
			reconcile_after = CASE WHEN $6 = '' THEN now() + $3 * interval '1 microsecond' END,
			reconcile_attempts = reconcile_attempts + $4,
			`+r.table.ProviderIDColumn+` = coalesce(nullif($5, ''), `+r.table.ProviderIDColumn+`),
			failure_message = coalesce(nullif($6, ''), failure_message),
			updated_at = now()
		WHERE id = $1 AND provider_key_generation = $2 AND status = '`+inReconciliation+`'`,
		e.ID, e.Generation, next.after.Microseconds(), counted, next.providerID, next.operatorNote)
	if err != nil {
		return fmt.Errorf("reschedule %s reconciliation: %w", r.table.Operation, err)
	}
	return nil
}

// Backoff doubles base per attempt, capped at ceiling.
func backoff(base, ceiling time.Duration, attempt int) time.Duration {
	delay := ceiling
	if shift := max(attempt, 0); shift < 62 && base <= ceiling>>shift {
		delay = base << shift
	}
	return delay
}

// pass is a reconciler's run, as reconcileWorker runs it.
type pass interface {
	Run(ctx context.Context) (ReconcileResult, error)
	passInfo() (ReconcileConfig, Table, *slog.Logger)
}

func (r *reconciler[Op, O]) passInfo() (ReconcileConfig, Table, *slog.Logger) {
	return r.cfg, r.table, r.logger
}

// reconcileWorker runs a reconciler as the River job whose arguments are
// Args.
type reconcileWorker[Args river.JobArgs] struct {
	river.WorkerDefaults[Args]
	Reconciler pass
	// Observe, if set, receives each pass's counts (for metrics).
	Observe func(ReconcileResult)
}

// Timeout lets a run spend its budget and finish its last operation: at
// most three provider calls and the recording.
func (w *reconcileWorker[Args]) Timeout(*river.Job[Args]) time.Duration {
	cfg, _, _ := w.Reconciler.passInfo()
	return cfg.RunBudget + cfg.CallTimeout*3 + 10*time.Second
}

// Work runs one reconciliation pass.
func (w *reconcileWorker[Args]) Work(ctx context.Context, _ *river.Job[Args]) error {
	res, err := w.Reconciler.Run(ctx)
	if w.Observe != nil {
		w.Observe(res)
	}
	if res.looked() > 0 || err != nil {
		_, table, logger := w.Reconciler.passInfo()
		logger.InfoContext(ctx, table.Operation+" reconciliation pass", slog.Int("settled", res.Settled),
			slog.Int("not_reached", res.NotReached), slog.Int("pending", res.Pending), slog.Int("undetermined", res.Undetermined),
			slog.Int("left_to_operator", res.LeftToOperator), slog.Int("failed", res.Failed), slog.Any("error", err))
	}
	return err
}
