package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// ReconcileConfig tunes the Reconciler. Zero values take the defaults.
type ReconcileConfig struct {
	// Batch is how many due payments one pass claims. Defaults to 50.
	Batch int
	// RunBudget bounds one run (one periodic job): it stops claiming
	// payments when the budget is spent. Defaults to 2m.
	RunBudget time.Duration
	// Lease is how far a claimed payment's next look is pushed while a
	// run works on it, so two runs never work the same payment. Must
	// exceed RunBudget. Defaults to RunBudget + 1m.
	Lease time.Duration
	// CallTimeout bounds one provider call. Defaults to 20s.
	CallTimeout time.Duration
	// ChargeCallTimeout is the charge worker's provider call timeout: no
	// charge request is in flight longer than this after its last attempt
	// started. Defaults to ChargeConfig{}.ProviderCallTimeout().
	ChargeCallTimeout time.Duration
	// Settle is how long after the last charge request can have ended
	// before "the provider has no intent for this payment" counts as proof:
	// time for a request still inside the provider to commit. Defaults to
	// 1m.
	Settle time.Duration
	// ClockSkew widens the window listed at the provider on both sides, for
	// the difference between the database's clock and the provider's.
	// Defaults to 5m.
	ClockSkew time.Duration
	// RetryBase and RetryMax shape the backoff between looks that could not
	// tell. Default 15s and 1h.
	RetryBase, RetryMax time.Duration
	// MaxAttempts is how many looks that could not tell are made before the
	// payment is left to an operator. Defaults to 40 (about a day with the
	// default backoff).
	MaxAttempts int
	// PollInterval is the wait between looks at an intent still pending at
	// the provider. Defaults to 30s.
	PollInterval time.Duration
	// MaxActionWait is how long after the first charge request an intent
	// waiting for the customer (3-D Secure) is canceled. Defaults to 1h.
	MaxActionWait time.Duration
}

// WithDefaults returns the configuration with zero values defaulted.
func (c ReconcileConfig) WithDefaults() ReconcileConfig {
	c.Batch = cmp.Or(c.Batch, 50)
	c.RunBudget = cmp.Or(c.RunBudget, 2*time.Minute)
	c.Lease = cmp.Or(c.Lease, c.RunBudget+time.Minute)
	c.CallTimeout = cmp.Or(c.CallTimeout, 20*time.Second)
	c.ChargeCallTimeout = cmp.Or(c.ChargeCallTimeout, ChargeConfig{}.ProviderCallTimeout())
	c.Settle = cmp.Or(c.Settle, time.Minute)
	c.ClockSkew = cmp.Or(c.ClockSkew, 5*time.Minute)
	c.RetryBase = cmp.Or(c.RetryBase, 15*time.Second)
	c.RetryMax = cmp.Or(c.RetryMax, time.Hour)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 40)
	c.PollInterval = cmp.Or(c.PollInterval, 30*time.Second)
	c.MaxActionWait = cmp.Or(c.MaxActionWait, time.Hour)
	return c
}

// Reconciler settles payments in requires_reconciliation by looking their
// charge up at the provider, never by charging: by intent id when one is
// known, else by the payment_id metadata (search, then a consistent list of
// the window in which the intent can have been created).
//
//   - Found and final: recorded exactly as the charge worker would (payment,
//     then key completed with the final response, one transaction).
//   - Found and pending: looked at again later; a customer action that never
//     came is canceled.
//   - Proven never created (no intent in a complete list of a settled
//     window, or no request ever sent): the payment fails with
//     FailureProviderNotReached and its key becomes failed_retryable, so the
//     client's retry with the same key charges it under the next generation.
//   - Anything else: looked at again with backoff, and after MaxAttempts
//     left to an operator (reconcile_after NULL).
type Reconciler struct {
	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	cfg      ReconcileConfig
}

// NewReconciler returns a Reconciler.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg ReconcileConfig) *Reconciler {
	return &Reconciler{pool: pool, keys: keys, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// ReconcileResult counts what a run did.
type ReconcileResult struct {
	Settled, NotReached, Pending, Undetermined, LeftToOperator int
	// Failed counts payments whose look or recording failed (a database
	// error): their lease runs out and a later run looks again.
	Failed int
}

func (r ReconcileResult) looked() int {
	return r.Settled + r.NotReached + r.Pending + r.Undetermined + r.LeftToOperator + r.Failed
}

// Run settles the payments that are due, until none is or the run budget
// is spent.
func (r *Reconciler) Run(ctx context.Context) (ReconcileResult, error) {
	var res ReconcileResult
	deadline := time.Now().Add(r.cfg.RunBudget)
	for time.Now().Before(deadline) {
		claimed, err := r.claim(ctx)
		if err != nil {
			return res, err
		}
		for _, c := range claimed {
			verdict, err := r.reconcile(ctx, c)
			if err != nil {
				res.Failed++
				r.logger.ErrorContext(ctx, "reconciling payment failed", slog.String("payment_id", c.ID), slog.Any("error", err))
				continue
			}
			verdict.count(&res)
		}
		if len(claimed) < r.cfg.Batch {
			break
		}
	}
	return res, nil
}

// ReconcileNow reconciles one payment at once, whatever its schedule (an
// operator's request, or a test). It claims the payment like a run does.
func (r *Reconciler) ReconcileNow(ctx context.Context, tenantID, paymentID string) (ReconcileResult, error) {
	var res ReconcileResult
	rows, err := r.pool.Query(ctx, `
		UPDATE payments SET reconcile_after = now() + $3 * interval '1 microsecond'
		WHERE tenant_id = $1 AND id = $2 AND status = 'requires_reconciliation'
		RETURNING `+paymentColumns+`, `+settledColumn(4),
		tenantID, paymentID, r.cfg.Lease.Microseconds(), r.settleAfter().Microseconds())
	claimed, err := collectClaims(rows, err)
	if err != nil {
		return res, err
	}
	if len(claimed) == 0 {
		return res, fmt.Errorf("reconcile payment %s: none awaiting reconciliation: %w", paymentID, ErrNotFound)
	}
	verdict, err := r.reconcile(ctx, claimed[0])
	if err != nil {
		return res, err
	}
	verdict.count(&res)
	return res, nil
}

// settleAfter is how long after the last charge request started its
// window has settled.
func (r *Reconciler) settleAfter() time.Duration {
	return r.cfg.ChargeCallTimeout + r.cfg.Settle
}

// settledColumn computes, by the database's clock (the one that wrote
// last_provider_attempt_at), whether no charge request can still be in
// flight.
func settledColumn(param int) string {
	return fmt.Sprintf(`(last_provider_attempt_at IS NULL OR
		last_provider_attempt_at + $%d * interval '1 microsecond' <= now()) AS settled`, param)
}

// claim is a payment leased to one run, with whether its attempt window
// has settled by the database's clock.
type claim struct {
	Payment
	Settled bool `db:"settled"`
}

// claim leases the next due payments: their reconcile_after moves past the
// run, so a concurrent run skips them, and a run that dies releases them
// when the lease ends.
func (r *Reconciler) claim(ctx context.Context) ([]claim, error) {
	rows, err := r.pool.Query(ctx, `
		UPDATE payments SET reconcile_after = now() + $2 * interval '1 microsecond'
		WHERE id IN (
			SELECT id FROM payments
			WHERE status = 'requires_reconciliation' AND reconcile_after <= now()
			ORDER BY reconcile_after
			LIMIT $1
			FOR UPDATE SKIP LOCKED)
		RETURNING `+paymentColumns+`, `+settledColumn(3),
		r.cfg.Batch, r.cfg.Lease.Microseconds(), r.settleAfter().Microseconds())
	return collectClaims(rows, err)
}

func collectClaims(rows pgx.Rows, err error) ([]claim, error) {
	if err != nil {
		return nil, fmt.Errorf("claim payments to reconcile: %w", err)
	}
	claims, err := pgx.CollectRows(rows, pgx.RowToStructByName[claim])
	if err != nil {
		return nil, fmt.Errorf("claim payments to reconcile: %w", err)
	}
	return claims, nil
}

// verdict is what one look concluded.
type verdict int

const (
	verdictSettled verdict = iota + 1
	verdictNotReached
	verdictPending
	verdictUndetermined
	verdictLeftToOperator
)

func (v verdict) count(res *ReconcileResult) {
	switch v {
	case verdictSettled:
		res.Settled++
	case verdictNotReached:
		res.NotReached++
	case verdictPending:
		res.Pending++
	case verdictUndetermined:
		res.Undetermined++
	case verdictLeftToOperator:
		res.LeftToOperator++
	}
}

func (r *Reconciler) reconcile(ctx context.Context, c claim) (verdict, error) {
	p := c.Payment
	log := r.logger.With(slog.String("tenant_id", p.TenantID), slog.String("payment_id", p.ID),
		slog.Int("generation", p.ProviderKeyGeneration), slog.Int("reconcile_attempt", p.ReconcileAttempts+1))

	if p.FirstProviderAttemptAt == nil {
		// The attempt clock commits before any provider request is sent:
		// without it, no request for this generation ever left.
		log.InfoContext(ctx, "no provider request was ever sent for this payment")
		return verdictNotReached, r.recordNotReached(ctx, p)
	}

	out, absent, note := r.lookUp(ctx, p, c.Settled)
	log = log.With(slog.String("outcome", out.Kind.String()), slog.String("intent_id", out.IntentID()))
	switch {
	case out.Kind == provider.Succeeded || out.Kind == provider.Declined:
		log.InfoContext(ctx, "reconciled: the provider's outcome is final")
		return verdictSettled, r.recordFinal(ctx, p, out)
	case out.Kind == provider.Pending:
		if out.Intent.Status == stripe.PaymentIntentStatusRequiresAction && time.Since(*p.FirstProviderAttemptAt) > r.cfg.MaxActionWait {
			log.WarnContext(ctx, "customer action not completed in time; canceling the intent")
			callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
			canceled := r.provider.CancelIntent(callCtx, out.IntentID(), cancelKey(p))
			cancel()
			if canceled.Kind == provider.Declined {
				return verdictSettled, r.recordFinal(ctx, p, canceled)
			}
			out, note = canceled, "canceling the intent failed: "+errText(canceled.Err)
			break
		}
		log.InfoContext(ctx, "intent still pending at the provider; looking again later", slog.String("intent_status", string(out.Intent.Status)))
		// Pending is not a failed look: it does not count toward MaxAttempts.
		return verdictPending, r.reschedule(ctx, p, nextLook{intentID: out.IntentID(), after: r.cfg.PollInterval})
	case absent:
		log.InfoContext(ctx, "reconciled: the provider never created an intent for this payment")
		return verdictNotReached, r.recordNotReached(ctx, p)
	}

	if p.ReconcileAttempts+1 >= r.cfg.MaxAttempts {
		log.ErrorContext(ctx, "reconciliation could not tell; leaving the payment to an operator", slog.String("note", note), slog.Any("error", out.Err))
		return verdictLeftToOperator, r.reschedule(ctx, p, nextLook{intentID: out.IntentID(), counted: true,
			operatorNote: "reconciliation could not determine the outcome: " + note + "; an operator must check the provider"})
	}
	delay := backoff(r.cfg.RetryBase, r.cfg.RetryMax, p.ReconcileAttempts)
	log.WarnContext(ctx, "reconciliation could not tell yet; looking again later", slog.String("note", note), slog.Duration("delay", delay), slog.Any("error", out.Err))
	return verdictUndetermined, r.reschedule(ctx, p, nextLook{intentID: out.IntentID(), after: delay, counted: true})
}

// lookUp asks the provider what became of p's charge. absent is the proof
// that no intent was created for p's generation; otherwise an Ambiguous
// outcome carries in note why the look could not tell.
func (r *Reconciler) lookUp(ctx context.Context, p Payment, settled bool) (out provider.Outcome, absent bool, note string) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if p.ProviderPaymentIntentID != nil {
		out := r.provider.RetrieveIntent(callCtx, *p.ProviderPaymentIntentID)
		return out, false, "reading intent " + *p.ProviderPaymentIntentID + ": " + errText(out.Err)
	}
	last := *p.FirstProviderAttemptAt
	if p.LastProviderAttemptAt != nil {
		last = *p.LastProviderAttemptAt
	}
	found, err := r.provider.FindIntents(callCtx, provider.Find{
		MetadataKey: MetadataPaymentID, MetadataValue: p.ID,
		CreatedFrom: p.FirstProviderAttemptAt.Add(-r.cfg.ClockSkew),
		CreatedTo:   last.Add(r.cfg.ChargeCallTimeout + r.cfg.ClockSkew),
		Scan:        true,
	})
	if err != nil {
		return provider.Outcome{Kind: provider.Ambiguous, Err: err}, false, "looking the intent up failed"
	}
	var mine []*provider.Intent
	for _, in := range found.Intents {
		if belongsTo(in, p) {
			mine = append(mine, in)
		}
	}
	switch {
	case len(mine) == 1:
		// Search results can be stale: read the intent itself.
		out := r.provider.RetrieveIntent(callCtx, mine[0].ID)
		if out.Kind == provider.Ambiguous && out.Intent == nil {
			out.Intent = mine[0]
		}
		return out, false, "reading intent " + mine[0].ID + ": " + errText(out.Err)
	case len(mine) > 1:
		return provider.Outcome{Kind: provider.Ambiguous, Err: fmt.Errorf("%d intents carry this payment's id and generation", len(mine))},
			false, "several intents were found for one charge"
	case !found.Complete:
		return provider.Outcome{Kind: provider.Ambiguous}, false, "search found nothing and the list was not complete"
	case !settled:
		return provider.Outcome{Kind: provider.Ambiguous}, false, "no intent yet, but a charge request may still be in flight"
	}
	return provider.Outcome{}, true, "no intent exists for this payment's generation"
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// recordFinal records a final outcome found by reconciliation, exactly as
// the charge worker would: payment, then key, in one transaction.
func (r *Reconciler) recordFinal(ctx context.Context, p Payment, out provider.Outcome) error {
	return pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, r.keys, p.TenantID, p.ID); err != nil {
			return err
		}
		return recordOutcome(ctx, tx, r.keys, p, []Status{StatusRequiresReconciliation}, out)
	})
}

// notReachedMessage is what the payment shows once proven never charged.
const notReachedMessage = "The payment never reached the payment provider and nothing was charged. " +
	"Retry the request with the same Idempotency-Key to charge it."

// recordNotReached fails a payment proven never to have reached the
// provider and makes its key retryable, payment first.
func (r *Reconciler) recordNotReached(ctx context.Context, p Payment) error {
	return pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, r.keys, p.TenantID, p.ID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE payments SET status = 'failed', failure_code = $4, decline_code = NULL, failure_message = $5,
				reconcile_after = NULL, updated_at = now()
			WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = 'requires_reconciliation'`,
			p.TenantID, p.ID, p.ProviderKeyGeneration, FailureProviderNotReached, notReachedMessage)
		if err != nil {
			return fmt.Errorf("fail payment never charged: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // settled meanwhile
		}
		if err := r.keys.MarkFailedRetryable(ctx, tx, p.TenantID, p.IdempotencyKey); err != nil {
			return fmt.Errorf("make idempotency key retryable: %w", err)
		}
		return nil
	})
}

// nextLook is when and how the reconciler looks at a payment again.
type nextLook struct {
	// intentID, if found, is remembered so the next look reads it directly.
	intentID string
	after    time.Duration
	// counted is whether this look counts toward MaxAttempts.
	counted bool
	// operatorNote, when set, stops the schedule and tells an operator why.
	operatorNote string
}

// reschedule records the next look at p.
func (r *Reconciler) reschedule(ctx context.Context, p Payment, next nextLook) error {
	counted := 0
	if next.counted {
		counted = 1
	}
	_, err := r.pool.Exec(ctx, `
		UPDATE payments SET
			reconcile_after = CASE WHEN $6 = '' THEN now() + $3 * interval '1 microsecond' END,
			reconcile_attempts = reconcile_attempts + $4,
			provider_payment_intent_id = coalesce(nullif($5, ''), provider_payment_intent_id),
			failure_message = coalesce(nullif($6, ''), failure_message),
			updated_at = now()
		WHERE id = $1 AND provider_key_generation = $2 AND status = 'requires_reconciliation'`,
		p.ID, p.ProviderKeyGeneration, next.after.Microseconds(), counted, next.intentID, next.operatorNote)
	if err != nil {
		return fmt.Errorf("reschedule reconciliation: %w", err)
	}
	return nil
}

// backoff doubles base per attempt, capped at ceiling.
func backoff(base, ceiling time.Duration, attempt int) time.Duration {
	delay := ceiling
	if shift := max(attempt, 0); shift < 62 && base <= ceiling>>shift {
		delay = base << shift
	}
	return delay
}

// ReconcilePaymentsArgs is the Reconciler's periodic job.
type ReconcilePaymentsArgs struct{}

// Kind is the job's River kind.
func (ReconcilePaymentsArgs) Kind() string { return "reconcile_payments" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (ReconcilePaymentsArgs) InsertOpts() river.InsertOpts {
	return operation.MaintenanceInsertOpts()
}

// ReconcileWorker runs the Reconciler as a River job.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcilePaymentsArgs]
	Reconciler *Reconciler
	// Observe, if set, receives each pass's counts (for metrics).
	Observe func(ReconcileResult)
}

// Timeout lets a run spend its budget and finish its last payment: at most
// three provider calls and the recording.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcilePaymentsArgs]) time.Duration {
	return w.Reconciler.cfg.RunBudget + w.Reconciler.cfg.CallTimeout*3 + 10*time.Second
}

// Work runs one reconciliation pass.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcilePaymentsArgs]) error {
	res, err := w.Reconciler.Run(ctx)
	if w.Observe != nil {
		w.Observe(res)
	}
	if res.looked() > 0 || err != nil {
		w.Reconciler.logger.InfoContext(ctx, "reconciliation pass", slog.Int("settled", res.Settled), slog.Int("not_reached", res.NotReached),
			slog.Int("pending", res.Pending), slog.Int("undetermined", res.Undetermined), slog.Int("left_to_operator", res.LeftToOperator),
			slog.Int("failed", res.Failed), slog.Any("error", err))
	}
	return err
}
