package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/provider"
)

// ChargeConfig tunes the charge worker. Zero values take the defaults.
type ChargeConfig struct {
	// JobTimeout bounds one provider attempt. Defaults to 30s.
	JobTimeout time.Duration
	// ProviderKeyMargin is the age of a payment's first provider attempt
	// after which the provider is no longer called for it: the provider
	// forgets idempotency keys after 24 hours, and a call after that could
	// charge a second time. Such payments go to reconciliation. Defaults to
	// 23h.
	ProviderKeyMargin time.Duration
	// PollInterval is how long the job waits before polling an intent that
	// is processing or requires action. Defaults to 2s.
	PollInterval time.Duration
	// MaxPollDuration bounds polling, counted from the first provider
	// attempt; past it the payment goes to reconciliation. Defaults to 1h.
	MaxPollDuration time.Duration
	// RecordTimeout bounds the writes that record a provider answer. They
	// run after the job's own deadline when the provider call used it up,
	// and once more on a last attempt whose recording failed (to hand the
	// payment to reconciliation). Defaults to 10s.
	RecordTimeout time.Duration
}

// MaxAttemptDuration is how long one attempt can run, recording included:
// River must not rescue a job as stuck before then, or two attempts of one
// job would run at once.
func (c ChargeConfig) MaxAttemptDuration() time.Duration {
	c = c.WithDefaults()
	return c.JobTimeout + 2*c.RecordTimeout
}

// ProviderCallTimeout bounds one provider call: the job timeout less a
// fifth (at most 5s) left for recording the answer.
func (c ChargeConfig) ProviderCallTimeout() time.Duration {
	c = c.WithDefaults()
	return c.JobTimeout - min(c.JobTimeout/5, 5*time.Second)
}

// WithDefaults returns the configuration with zero values defaulted.
// Timings are the engine worker's clocks taken from c (defaults applied
// first).
func (c ChargeConfig) Timings() operation.Timings {
	return operation.Timings{JobTimeout: c.JobTimeout, CallTimeout: c.ProviderCallTimeout(), RecordTimeout: c.RecordTimeout,
		KeyMargin: c.ProviderKeyMargin, PollInterval: c.PollInterval, MaxPollDuration: c.MaxPollDuration}
}

func (c ChargeConfig) WithDefaults() ChargeConfig {
	c.JobTimeout = cmp.Or(c.JobTimeout, 30*time.Second)
	c.ProviderKeyMargin = cmp.Or(c.ProviderKeyMargin, 23*time.Hour)
	c.PollInterval = cmp.Or(c.PollInterval, 2*time.Second)
	c.MaxPollDuration = cmp.Or(c.MaxPollDuration, time.Hour)
	c.RecordTimeout = cmp.Or(c.RecordTimeout, 10*time.Second)
	return c
}

// ChargeWorker works charge_payment jobs: it charges a payment at the
// provider exactly once and records the outcome.
//
// Exactly once rests on two facts. Every attempt for a payment sends the
// same provider idempotency key, so however often the job runs (retries,
// a crash after the provider charged, two workers) the provider charges at
// most once and answers the rest with the first result. And the outcome is
// recorded together with the job's completion, so a job that recorded its
// outcome never runs again, and one that did not will ask the provider again
// and get the same answer. Where asking again cannot tell (the provider
// replays a stored 5xx, attempts are exhausted, the key's window is ending),
// the payment goes to the Reconciler, which looks the charge up instead.
type ChargeWorker struct {
	river.WorkerDefaults[ChargePaymentArgs]

	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	cfg      ChargeConfig
	recorder *outcomeRecorder
}

// NewChargeWorker returns a worker.
func NewChargeWorker(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg ChargeConfig) *ChargeWorker {
	cfg = cfg.WithDefaults()
	return &ChargeWorker{pool: pool, keys: keys, provider: pc, logger: logger, cfg: cfg,
		recorder: newOutcomeRecorder(pool, keys, cfg.RecordTimeout)}
}

// Timeout bounds one attempt; the provider call carries this deadline.
func (w *ChargeWorker) Timeout(*river.Job[ChargePaymentArgs]) time.Duration {
	return w.cfg.JobTimeout
}

// Work charges the job's payment; on the job's last attempt any failure
// hands the payment to reconciliation (operation.LastAttempt).
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargePaymentArgs]) error {
	log := w.logger.With(slog.String("tenant_id", job.Args.TenantID), slog.String("payment_id", job.Args.PaymentID),
		slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt))
	last := operation.LastAttempt{Action: "charge", Operation: "payment", RecordTimeout: w.cfg.RecordTimeout,
		HandOver: func(ctx context.Context, reason string) error { return w.reconcileJobPayment(ctx, job, reason) }}
	return last.Run(ctx, job.JobRow, log, func() error { return w.work(ctx, job, log) })
}

func (w *ChargeWorker) work(ctx context.Context, job *river.Job[ChargePaymentArgs], log *slog.Logger) error {
	p, age, ok, err := startProviderAttempt(ctx, w.pool, job.Args.TenantID, job.Args.PaymentID)
	if errors.Is(err, ErrNotFound) {
		log.ErrorContext(ctx, "charge job for a payment that does not exist")
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if !ok {
		log.InfoContext(ctx, "payment already final; nothing to do", slog.String("status", string(p.Status)))
		return nil
	}
	log = log.With(slog.Int("generation", p.ProviderKeyGeneration))
	if age > w.cfg.ProviderKeyMargin {
		log.WarnContext(ctx, "provider idempotency window nearly over; not calling the provider", slog.Duration("since_first_attempt", age))
		return w.reconcileLater(ctx, job, p, "the provider's idempotency window for this payment has passed")
	}

	// The provider call gets a deadline short of the job's, so that after a
	// provider that hangs there is still time to record what happened.
	callCtx, cancelCall := context.WithTimeout(ctx, w.cfg.ProviderCallTimeout())
	var out provider.Outcome
	if p.ProviderPaymentIntentID != nil {
		out = w.provider.For(p.Account()).RetrieveIntent(callCtx, *p.ProviderPaymentIntentID)
	} else {
		out = w.provider.For(p.Account()).CreateIntent(callCtx, chargeOf(p))
	}
	cancelCall()
	// What the provider said must be written down even if the job's own
	// deadline or a shutdown has cancelled ctx meanwhile: on the last
	// attempt, a lost write would leave the payment processing with no job.
	ctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RecordTimeout)
	defer cancelRecord()
	log = log.With(slog.String("provider_idempotency_key", p.ProviderIdempotencyKey), slog.String("intent_id", out.IntentID()),
		slog.String("outcome", out.Kind.String()))

	switch out.Kind {
	case provider.Succeeded:
		log.InfoContext(ctx, "payment succeeded")
		return w.finish(ctx, job, p, out)
	case provider.Authorized:
		log.InfoContext(ctx, "payment authorized; it awaits capture")
		return w.finish(ctx, job, p, out)
	case provider.Declined:
		log.InfoContext(ctx, "payment declined", slog.String("code", out.Code), slog.String("decline_code", out.DeclineCode))
		return w.finish(ctx, job, p, out)
	case provider.Rejected:
		log.WarnContext(ctx, "provider rejected payment", slog.String("code", out.Code), slog.String("param", out.Param), slog.Any("error", out.Err))
		return w.finish(ctx, job, p, out)
	case provider.Pending:
		if age <= w.cfg.MaxPollDuration {
			if err := w.notePending(ctx, p, out); err != nil {
				return err
			}
			log.InfoContext(ctx, "payment pending at the provider; polling", slog.String("intent_status", string(out.Intent.Status)))
			return river.JobSnooze(w.cfg.PollInterval)
		}
		if out.Intent.Status != stripe.PaymentIntentStatusRequiresAction {
			// The provider is settling it; only it knows how this ends.
			log.WarnContext(ctx, "payment still pending at the provider; giving up polling", slog.String("intent_status", string(out.Intent.Status)))
			return w.reconcileLater(ctx, job, p, "the payment stayed "+string(out.Intent.Status)+" at the provider")
		}
		// Waiting for the customer (3-D Secure) that never came. Nothing was
		// charged, and canceling makes sure nothing will be.
		log.WarnContext(ctx, "customer action not completed in time; canceling the intent")
		canceled := w.provider.For(p.Account()).CancelIntent(ctx, out.IntentID(), cancelKey(p))
		if canceled.Kind != provider.Declined {
			return retryLater(ctx, p, log, canceled.Err)
		}
		return w.finish(ctx, job, p, canceled)
	case provider.KeyConflict:
		log.ErrorContext(ctx, "BUG: provider saw this payment's idempotency key with other parameters", slog.Any("error", out.Err))
		return w.reconcileLater(ctx, job, p, "the provider reported an idempotency key conflict")
	default:
		if out.Replayed && out.HTTPStatus >= 500 {
			// The provider stored this error under the key and will answer
			// every retry with it: only a lookup can tell what happened.
			log.WarnContext(ctx, "provider replays a stored error for this key; looking the charge up instead", slog.Int("http_status", out.HTTPStatus))
			return w.reconcileLater(ctx, job, p, fmt.Sprintf("the provider answers this charge's key with a stored %d error", out.HTTPStatus))
		}
		return retryLater(ctx, p, log, out.Err)
	}
}

// retryLater fails the attempt so River retries it with the same key. On
// the last attempt, Work hands the payment to reconciliation instead.
// notePending records a pending answer. Only the poll at which the payment
// starts waiting for its customer takes the locks (payment row, then key)
// to refresh the key's stored 202; every other poll is one UPDATE.
func (w *ChargeWorker) notePending(ctx context.Context, p Payment, out provider.Outcome) error {
	if out.Intent == nil || out.Intent.Status != stripe.PaymentIntentStatusRequiresAction || p.Status == StatusRequiresAction {
		return recordPending(ctx, w.pool, p.ID, out)
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		locked, err := lockForOutcome(ctx, tx, w.keys, p.TenantID, p.ID)
		if err != nil {
			return err
		}
		return notePending(ctx, tx, w.keys, locked, out)
	})
}

func retryLater(ctx context.Context, p Payment, log *slog.Logger, err error) error {
	log.WarnContext(ctx, "provider outcome undetermined; will retry with the same key", slog.Any("error", err))
	return fmt.Errorf("charge payment %s: the provider's answer proves nothing: %w", p.ID, err)
}

// finish records a final outcome: the payment's state, the response that
// retries of the client's request will replay, and the job's completion, in
// one transaction, so none of them is ever seen without the others (with
// other charges' outcomes finishing at the same moment: outcomeRecorder).
func (w *ChargeWorker) finish(ctx context.Context, job *river.Job[ChargePaymentArgs], p Payment, out provider.Outcome) error {
	return w.recorder.record(ctx, job, p, out)
}

// recordOutcome records a final provider outcome for p (a payment in one of
// the from states): the payment's final state and the idempotency key's
// final response. The caller holds lockForOutcome's locks. A payment that
// already left the from states (another run recorded it) is left alone.
func recordOutcome(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, p Payment, from []Status, out provider.Outcome) error {
	status := StatusFailed
	switch out.Kind {
	case provider.Succeeded:
		status = StatusSucceeded
	case provider.Authorized:
		status = StatusRequiresCapture
	}
	final, changed, err := finalizePayment(ctx, tx, p, from, status, out)
	if err != nil || !changed {
		return err
	}
	resp, err := finalResponse(final, out.Kind)
	if err != nil {
		return err
	}
	if err := keys.Complete(ctx, tx, p.TenantID, p.IdempotencyKey, resp); err != nil {
		return fmt.Errorf("complete idempotency key: %w", err)
	}
	return nil
}

// reconcileLater gives up on determining the outcome by retrying: the
// payment goes to the Reconciler and the client's key answers 409 until it
// is settled.
func (w *ChargeWorker) reconcileLater(ctx context.Context, job *river.Job[ChargePaymentArgs], p Payment, reason string) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, w.keys, p.TenantID, p.ID); err != nil {
			return err
		}
		if err := paymentsTable.HandOver(ctx, tx, w.keys, entryOf(p), reason); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
}

// reconcileJobPayment is reconcileLater for a job whose payment was not
// read (the failure may have been reading it).
func (w *ChargeWorker) reconcileJobPayment(ctx context.Context, job *river.Job[ChargePaymentArgs], reason string) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		p, err := lockForOutcome(ctx, tx, w.keys, job.Args.TenantID, job.Args.PaymentID)
		if err != nil {
			return err
		}
		if err := paymentsTable.HandOver(ctx, tx, w.keys, entryOf(p), reason); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
}

func completeJob(ctx context.Context, tx pgx.Tx, job *river.Job[ChargePaymentArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	return nil
}

// finalResponse is what a retry of the client's POST replays once the
// payment is final: 201 with the payment, or a problem that names it.
func finalResponse(p Payment, kind provider.Kind) (idempotency.Response, error) {
	if p.Status == StatusSucceeded || p.Status == StatusRequiresCapture {
		return operation.Created(p, "/v1/payments/"+p.ID)
	}
	code, decline := deref(p.FailureCode), deref(p.DeclineCode)
	pe := &problem.Error{
		Type:       problem.ProviderRejected,
		Detail:     fmt.Sprintf("The payment provider rejected payment %s (%s): %s", p.ID, code, deref(p.FailureMessage)),
		Extensions: map[string]any{"payment_id": p.ID, "provider_code": code},
	}
	if kind == provider.Declined {
		pe.Type = problem.CardDeclined
		pe.Detail = fmt.Sprintf("The card was declined (%s); payment %s is failed.", cmp.Or(decline, code), p.ID)
		pe.Extensions["decline_code"] = decline
	}
	return operation.Refused(pe, ""), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
