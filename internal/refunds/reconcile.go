package refunds

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// Reconciler settles refunds in requires_reconciliation by looking them up
// at the provider, never by refunding: by provider refund id when one is
// known, else among the payment intent's refunds (the list endpoint, which
// is consistent) by refund_id and refund_generation metadata. It takes the
// payments Reconciler's settings (ReconcileConfig.ChargeCallTimeout is the
// refund worker's call timeout, the same by construction) and behaves as it
// does:
//
//   - found and final: recorded as the worker records it;
//   - found and pending: looked at again after PollInterval, not counted;
//   - proven never created (no request ever sent, or absent from a complete
//     list once the last request's window has settled): failed with
//     FailureProviderNotReached, key failed_retryable, so the client's retry
//     with the same key resumes it under the next generation;
//   - anything else: looked at again with backoff, and after MaxAttempts
//     left to an operator (reconcile_after NULL).
type Reconciler struct {
	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	cfg      payments.ReconcileConfig
}

// NewReconciler returns a refund Reconciler.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg payments.ReconcileConfig) *Reconciler {
	return &Reconciler{pool: pool, keys: keys, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// ReconcileResult counts what a run did.
type ReconcileResult struct {
	Settled, NotReached, Pending, Undetermined, LeftToOperator int
	// Failed counts refunds whose look or recording failed; their lease
	// runs out and a later run looks again.
	Failed int
}

func (r ReconcileResult) looked() int {
	return r.Settled + r.NotReached + r.Pending + r.Undetermined + r.LeftToOperator + r.Failed
}

// claim is a refund leased to one run, with its payment's intent and
// whether its attempt window has settled by the database's clock.
type claim struct {
	Refund
	IntentID *string `db:"intent_id"`
	Settled  bool    `db:"settled"`
}

// claimColumns are a claimed refund's columns; $3 is the settle delay.
const claimColumns = refundColumns + `,
	(SELECT provider_payment_intent_id FROM payments WHERE payments.id = refunds.payment_id) AS intent_id,
	(last_provider_attempt_at IS NULL OR last_provider_attempt_at + $3 * interval '1 microsecond' <= now()) AS settled`

// Run settles the refunds that are due, until none is or the run budget is
// spent.
func (r *Reconciler) Run(ctx context.Context) (ReconcileResult, error) {
	var res ReconcileResult
	deadline := time.Now().Add(r.cfg.RunBudget)
	for time.Now().Before(deadline) {
		rows, err := r.pool.Query(ctx, `
			UPDATE refunds SET reconcile_after = now() + $2 * interval '1 microsecond'
			WHERE id IN (
				SELECT id FROM refunds
				WHERE status = 'requires_reconciliation' AND reconcile_after <= now()
				ORDER BY reconcile_after
				LIMIT $1
				FOR UPDATE SKIP LOCKED)
			RETURNING `+claimColumns,
			r.cfg.Batch, r.cfg.Lease.Microseconds(), r.settleAfter().Microseconds())
		claimed, err := collectClaims(rows, err)
		if err != nil {
			return res, err
		}
		for _, c := range claimed {
			if err := r.reconcile(ctx, c, &res); err != nil {
				res.Failed++
				r.logger.ErrorContext(ctx, "reconciling refund failed", slog.String("refund_id", c.ID), slog.Any("error", err))
			}
		}
		if len(claimed) < r.cfg.Batch {
			break
		}
	}
	return res, nil
}

// ReconcileNow reconciles one refund at once, whatever its schedule.
func (r *Reconciler) ReconcileNow(ctx context.Context, tenantID, refundID string) (ReconcileResult, error) {
	var res ReconcileResult
	rows, err := r.pool.Query(ctx, `
		UPDATE refunds SET reconcile_after = now() + $4 * interval '1 microsecond'
		WHERE tenant_id = $1 AND id = $2 AND status = 'requires_reconciliation'
		RETURNING `+claimColumns,
		tenantID, refundID, r.settleAfter().Microseconds(), r.cfg.Lease.Microseconds())
	claimed, err := collectClaims(rows, err)
	if err != nil {
		return res, err
	}
	if len(claimed) == 0 {
		return res, fmt.Errorf("reconcile refund %s: none awaiting reconciliation: %w", refundID, ErrNotFound)
	}
	return res, r.reconcile(ctx, claimed[0], &res)
}

// settleAfter is how long after the last refund request started no
// request can still be in flight, nor uncommitted inside the provider.
func (r *Reconciler) settleAfter() time.Duration {
	return r.cfg.ChargeCallTimeout + r.cfg.Settle
}

func collectClaims(rows pgx.Rows, err error) ([]claim, error) {
	if err != nil {
		return nil, fmt.Errorf("claim refunds to reconcile: %w", err)
	}
	claims, err := pgx.CollectRows(rows, pgx.RowToStructByName[claim])
	if err != nil {
		return nil, fmt.Errorf("claim refunds to reconcile: %w", err)
	}
	return claims, nil
}

func (r *Reconciler) reconcile(ctx context.Context, c claim, res *ReconcileResult) error {
	ref := c.Refund
	log := r.logger.With(slog.String("tenant_id", ref.TenantID), slog.String("refund_id", ref.ID), slog.String("payment_id", ref.PaymentID),
		slog.Int("generation", ref.ProviderKeyGeneration), slog.Int("reconcile_attempt", ref.ReconcileAttempts+1))
	if ref.FirstProviderAttemptAt == nil {
		// The attempt clock commits before any provider request is sent.
		log.InfoContext(ctx, "no provider request was ever sent for this refund")
		res.NotReached++
		return r.recordNotReached(ctx, ref)
	}

	out, absent, note := r.lookUp(ctx, c)
	log = log.With(slog.String("outcome", out.Kind.String()), slog.String("provider_refund_id", out.RefundID()))
	switch {
	case out.Kind == provider.Succeeded || out.Kind == provider.Declined:
		log.InfoContext(ctx, "reconciled: the provider's outcome is final")
		res.Settled++
		return r.recordFinal(ctx, ref, out)
	case out.Kind == provider.Pending:
		log.InfoContext(ctx, "refund still pending at the provider; looking again later")
		res.Pending++
		return r.reschedule(ctx, ref, nextLook{refundID: out.RefundID(), after: r.cfg.PollInterval})
	case absent:
		log.InfoContext(ctx, "reconciled: the provider never created this refund")
		res.NotReached++
		return r.recordNotReached(ctx, ref)
	}
	if ref.ReconcileAttempts+1 >= r.cfg.MaxAttempts {
		log.ErrorContext(ctx, "reconciliation could not tell; leaving the refund to an operator", slog.String("note", note), slog.Any("error", out.Err))
		res.LeftToOperator++
		return r.reschedule(ctx, ref, nextLook{refundID: out.RefundID(), counted: true,
			operatorNote: "reconciliation could not determine the outcome: " + note + "; an operator must check the provider"})
	}
	delay := backoff(r.cfg.RetryBase, r.cfg.RetryMax, ref.ReconcileAttempts)
	log.WarnContext(ctx, "reconciliation could not tell yet; looking again later", slog.String("note", note), slog.Duration("delay", delay), slog.Any("error", out.Err))
	res.Undetermined++
	return r.reschedule(ctx, ref, nextLook{refundID: out.RefundID(), after: delay, counted: true})
}

// lookUp asks the provider what became of the refund. absent is the proof
// that none was created for its generation; otherwise an Ambiguous outcome
// carries in note why the look could not tell.
func (r *Reconciler) lookUp(ctx context.Context, c claim) (out provider.RefundOutcome, absent bool, note string) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if c.ProviderRefundID != nil {
		out := r.provider.RetrieveRefund(callCtx, *c.ProviderRefundID)
		return out, false, "reading refund " + *c.ProviderRefundID + ": " + errText(out.Err)
	}
	if c.IntentID == nil {
		return provider.RefundOutcome{Kind: provider.Ambiguous}, false, "the refund's payment has no payment intent"
	}
	found, err := r.provider.ListRefunds(callCtx, *c.IntentID, MetadataRefundID, c.ID, 0)
	if err != nil {
		return provider.RefundOutcome{Kind: provider.Ambiguous, Err: err}, false, "listing the intent's refunds failed"
	}
	var mine []*provider.Refund
	for _, re := range found.Refunds {
		if belongsTo(re, c.Refund) {
			mine = append(mine, re)
		}
	}
	switch {
	case len(mine) == 1:
		// The list is consistent: its object is as current as a read.
		return provider.RefundOutcomeOf(mine[0]), false, "refund " + mine[0].ID + " is " + string(mine[0].Status)
	case len(mine) > 1:
		return provider.RefundOutcome{Kind: provider.Ambiguous, Err: fmt.Errorf("%d provider refunds carry this refund's id and generation", len(mine))},
			false, "several provider refunds were found for one refund"
	case !found.Complete:
		return provider.RefundOutcome{Kind: provider.Ambiguous}, false, "the list of the intent's refunds was not complete"
	case !c.Settled:
		return provider.RefundOutcome{Kind: provider.Ambiguous}, false, "no refund yet, but a refund request may still be in flight"
	}
	return provider.RefundOutcome{}, true, "no provider refund exists for this refund's generation"
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// recordFinal records a final outcome found by reconciliation, as the
// worker would, under the one lock order.
func (r *Reconciler) recordFinal(ctx context.Context, ref Refund, out provider.RefundOutcome) error {
	return pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, r.keys, ref.TenantID, ref.ID); err != nil {
			return err
		}
		_, _, err := recordOutcome(ctx, tx, r.keys, ref, out)
		return err
	})
}

// notReachedMessage is what the refund shows once proven never sent.
const notReachedMessage = "The refund never reached the payment provider and nothing was refunded. " +
	"Retry the request with the same Idempotency-Key to refund it."

// recordNotReached fails a refund proven never to have reached the
// provider and makes its key retryable, payment and refund first.
func (r *Reconciler) recordNotReached(ctx context.Context, ref Refund) error {
	return pgx.BeginTxFunc(ctx, r.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, r.keys, ref.TenantID, ref.ID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE refunds SET status = 'failed', failure_code = $4, failure_message = $5, reconcile_after = NULL, updated_at = now()
			WHERE tenant_id = $1 AND id = $2 AND provider_key_generation = $3 AND status = 'requires_reconciliation'`,
			ref.TenantID, ref.ID, ref.ProviderKeyGeneration, FailureProviderNotReached, notReachedMessage)
		if err != nil {
			return fmt.Errorf("fail refund never sent: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil // settled meanwhile
		}
		if err := r.keys.MarkFailedRetryable(ctx, tx, ref.TenantID, ref.IdempotencyKey); err != nil {
			return fmt.Errorf("make idempotency key retryable: %w", err)
		}
		return nil
	})
}

// nextLook is when and how the reconciler looks at a refund again.
type nextLook struct {
	refundID     string
	after        time.Duration
	counted      bool
	operatorNote string
}

func (r *Reconciler) reschedule(ctx context.Context, ref Refund, next nextLook) error {
	counted := 0
	if next.counted {
		counted = 1
	}
	_, err := r.pool.Exec(ctx, `
		UPDATE refunds SET
			reconcile_after = CASE WHEN $6 = '' THEN now() + $3 * interval '1 microsecond' END,
			reconcile_attempts = reconcile_attempts + $4,
			provider_refund_id = coalesce(nullif($5, ''), provider_refund_id),
			failure_message = coalesce(nullif($6, ''), failure_message),
			updated_at = now()
		WHERE id = $1 AND provider_key_generation = $2 AND status = 'requires_reconciliation'`,
		ref.ID, ref.ProviderKeyGeneration, next.after.Microseconds(), counted, next.refundID, next.operatorNote)
	if err != nil {
		return fmt.Errorf("reschedule refund reconciliation: %w", err)
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

// ReconcileRefundsArgs is the refund Reconciler's periodic job.
type ReconcileRefundsArgs struct{}

// Kind is the job's River kind.
func (ReconcileRefundsArgs) Kind() string { return "reconcile_refunds" }

// InsertOpts puts the job on the maintenance queue, one at a time, without
// retries: the next tick is the retry.
func (ReconcileRefundsArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// ReconcileWorker runs the refund Reconciler as a River job.
type ReconcileWorker struct {
	river.WorkerDefaults[ReconcileRefundsArgs]
	Reconciler *Reconciler
}

// Timeout lets a run spend its budget and finish its last refund.
func (w *ReconcileWorker) Timeout(*river.Job[ReconcileRefundsArgs]) time.Duration {
	return w.Reconciler.cfg.RunBudget + w.Reconciler.cfg.CallTimeout*2 + 10*time.Second
}

// Work runs one reconciliation pass.
func (w *ReconcileWorker) Work(ctx context.Context, _ *river.Job[ReconcileRefundsArgs]) error {
	res, err := w.Reconciler.Run(ctx)
	if res.looked() > 0 || err != nil {
		w.Reconciler.logger.InfoContext(ctx, "refund reconciliation pass", slog.Int("settled", res.Settled), slog.Int("not_reached", res.NotReached),
			slog.Int("pending", res.Pending), slog.Int("undetermined", res.Undetermined), slog.Int("left_to_operator", res.LeftToOperator),
			slog.Int("failed", res.Failed), slog.Any("error", err))
	}
	return err
}
