package refunds

import (
	"context"
	"errors"
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

// Worker works refund_payment jobs: it makes a refund at the provider
// exactly once and records the outcome. It rests on the charge worker's two
// facts: every attempt sends the same provider key (derived from the refund
// and its generation), and the outcome, the key's final response and the
// job's completion commit together. Where asking again cannot tell (a
// replayed 5xx, the last attempt, the key's window ending) the refund goes
// to the Reconciler. It shares the charge worker's timers.
type Worker struct {
	river.WorkerDefaults[RefundPaymentArgs]

	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	cfg      payments.ChargeConfig
}

// NewWorker returns a refund worker.
func NewWorker(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg payments.ChargeConfig) *Worker {
	return &Worker{pool: pool, keys: keys, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// Timeout bounds one attempt; the provider call carries this deadline.
func (w *Worker) Timeout(*river.Job[RefundPaymentArgs]) time.Duration {
	return w.cfg.JobTimeout
}

// Work refunds the job's refund; on the job's last attempt any failure
// hands the refund to reconciliation (operation.LastAttempt).
func (w *Worker) Work(ctx context.Context, job *river.Job[RefundPaymentArgs]) error {
	log := w.logger.With(slog.String("tenant_id", job.Args.TenantID), slog.String("refund_id", job.Args.RefundID),
		slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt))
	last := operation.LastAttempt{Action: "refund", Operation: "refund", RecordTimeout: w.cfg.RecordTimeout,
		HandOver: func(ctx context.Context, reason string) error { return w.reconcileLater(ctx, job, reason) }}
	return last.Run(ctx, job.JobRow, log, func() error { return w.work(ctx, job, log) })
}

func (w *Worker) work(ctx context.Context, job *river.Job[RefundPaymentArgs], log *slog.Logger) error {
	r, err := GetRefund(ctx, w.pool, job.Args.TenantID, job.Args.RefundID)
	if errors.Is(err, ErrNotFound) {
		log.ErrorContext(ctx, "refund job for a refund that does not exist")
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if r.Status != StatusPending {
		log.InfoContext(ctx, "refund no longer pending; nothing to do", slog.String("status", string(r.Status)))
		return nil
	}
	p, err := payments.GetPayment(ctx, w.pool, r.TenantID, r.PaymentID)
	if err != nil {
		return err
	}
	if p.ProviderPaymentIntentID == nil {
		// Refunds are accepted only for succeeded payments, which have one.
		return w.reconcileLater(ctx, job, "the refund's payment has no payment intent")
	}
	log = log.With(slog.String("payment_id", r.PaymentID), slog.Int("generation", r.ProviderKeyGeneration),
		slog.String("provider_idempotency_key", r.ProviderIdempotencyKey))

	age, ok, err := startProviderAttempt(ctx, w.pool, r)
	if err != nil {
		return err
	}
	if !ok {
		log.InfoContext(ctx, "refund changed meanwhile; nothing to do")
		return nil
	}
	if age > w.cfg.ProviderKeyMargin {
		log.WarnContext(ctx, "provider idempotency window nearly over; not calling the provider", slog.Duration("since_first_attempt", age))
		return w.reconcileLater(ctx, job, "the provider's idempotency window for this refund has passed")
	}

	callCtx, cancelCall := context.WithTimeout(ctx, w.cfg.ProviderCallTimeout())
	var out provider.RefundOutcome
	if r.ProviderRefundID != nil {
		out = w.provider.RetrieveRefund(callCtx, *r.ProviderRefundID)
	} else {
		out = w.provider.CreateRefund(callCtx, requestOf(r, *p.ProviderPaymentIntentID))
	}
	cancelCall()
	// The answer is recorded even if the job's deadline or a shutdown
	// cancelled ctx meanwhile.
	ctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RecordTimeout)
	defer cancelRecord()
	log = log.With(slog.String("provider_refund_id", out.RefundID()), slog.String("outcome", out.Kind.String()))

	switch out.Kind {
	case provider.Succeeded, provider.Declined, provider.Rejected:
		log.InfoContext(ctx, "refund final at the provider", slog.String("code", out.Code), slog.Any("error", out.Err))
		return w.finish(ctx, job, r, out)
	case provider.Pending:
		if age <= w.cfg.MaxPollDuration {
			if err := recordPending(ctx, w.pool, r, out.RefundID()); err != nil {
				return err
			}
			log.InfoContext(ctx, "refund pending at the provider; polling", slog.String("refund_status", string(out.Refund.Status)))
			return river.JobSnooze(w.cfg.PollInterval)
		}
		log.WarnContext(ctx, "refund still pending at the provider; giving up polling")
		return w.reconcileLater(ctx, job, "the refund stayed "+string(out.Refund.Status)+" at the provider")
	case provider.KeyConflict:
		log.ErrorContext(ctx, "BUG: provider saw this refund's idempotency key with other parameters", slog.Any("error", out.Err))
		return w.reconcileLater(ctx, job, "the provider reported an idempotency key conflict")
	default:
		if out.Replayed && out.HTTPStatus >= 500 {
			log.WarnContext(ctx, "provider replays a stored error for this key; looking the refund up instead", slog.Int("http_status", out.HTTPStatus))
			return w.reconcileLater(ctx, job, fmt.Sprintf("the provider answers this refund's key with a stored %d error", out.HTTPStatus))
		}
		log.WarnContext(ctx, "provider outcome undetermined; will retry with the same key", slog.Any("error", out.Err))
		return fmt.Errorf("refund %s: the provider's answer proves nothing: %w", r.ID, out.Err)
	}
}

// finish records a final outcome, the key's final response and the job's
// completion in one transaction, under the payment's lock, then the
// refund's, then the key's.
func (w *Worker) finish(ctx context.Context, job *river.Job[RefundPaymentArgs], r Refund, out provider.RefundOutcome) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, w.keys, r.TenantID, r.ID); err != nil {
			return err
		}
		if _, _, err := recordOutcome(ctx, tx, w.keys, r, out); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
}

// reconcileLater hands the job's refund to the Reconciler (if still
// pending) and completes the job, in one transaction.
func (w *Worker) reconcileLater(ctx context.Context, job *river.Job[RefundPaymentArgs], reason string) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		r, err := lockForOutcome(ctx, tx, w.keys, job.Args.TenantID, job.Args.RefundID)
		if err != nil {
			return err
		}
		if err := handToReconciliation(ctx, tx, w.keys, r, reason); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
}
