package payments

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/problem"
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
}

// WithDefaults returns the configuration with zero values defaulted.
func (c ChargeConfig) WithDefaults() ChargeConfig {
	c.JobTimeout = cmp.Or(c.JobTimeout, 30*time.Second)
	c.ProviderKeyMargin = cmp.Or(c.ProviderKeyMargin, 23*time.Hour)
	c.PollInterval = cmp.Or(c.PollInterval, 2*time.Second)
	c.MaxPollDuration = cmp.Or(c.MaxPollDuration, time.Hour)
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
// and get the same answer.
type ChargeWorker struct {
	river.WorkerDefaults[outbox.ChargePaymentArgs]

	pool   *pgxpool.Pool
	keys   *idempotency.Store
	stripe *client.API
	logger *slog.Logger
	cfg    ChargeConfig
}

// NewChargeWorker returns a worker.
func NewChargeWorker(pool *pgxpool.Pool, keys *idempotency.Store, stripe *client.API, logger *slog.Logger, cfg ChargeConfig) *ChargeWorker {
	return &ChargeWorker{pool: pool, keys: keys, stripe: stripe, logger: logger, cfg: cfg.WithDefaults()}
}

// Timeout bounds one attempt; the provider call carries this deadline.
func (w *ChargeWorker) Timeout(*river.Job[outbox.ChargePaymentArgs]) time.Duration {
	return w.cfg.JobTimeout
}

// Work charges the job's payment.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[outbox.ChargePaymentArgs]) error {
	log := w.logger.With(slog.String("tenant_id", job.Args.TenantID), slog.String("payment_id", job.Args.PaymentID),
		slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt))

	p, err := GetPayment(ctx, w.pool, job.Args.TenantID, job.Args.PaymentID)
	if errors.Is(err, ErrNotFound) {
		log.ErrorContext(ctx, "charge job for a payment that does not exist")
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if p.Status.Terminal() {
		log.InfoContext(ctx, "payment already final; nothing to do", slog.String("status", string(p.Status)))
		return nil
	}

	firstAttempt, err := markFirstProviderAttempt(ctx, w.pool, p.ID)
	if err != nil {
		return err
	}
	age := time.Since(firstAttempt)
	if age > w.cfg.ProviderKeyMargin {
		log.WarnContext(ctx, "provider idempotency window nearly over; not calling the provider", slog.Duration("since_first_attempt", age))
		return w.reconcileLater(ctx, job, p, "the provider's idempotency window for this payment has passed")
	}

	// The provider call gets a deadline short of the job's, so that after a
	// provider that hangs there is still time to record what happened.
	callCtx, cancelCall := context.WithTimeout(ctx, w.providerCallTimeout())
	var out providerOutcome
	if p.ProviderPaymentIntentID != nil {
		out = retrieveIntent(callCtx, w.stripe, *p.ProviderPaymentIntentID)
	} else {
		out = createIntent(callCtx, w.stripe, p)
	}
	cancelCall()
	// What the provider said must be written down even if the job's own
	// deadline or a shutdown has cancelled ctx meanwhile: on the last
	// attempt, a lost write would leave the payment processing with no job.
	ctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	log = log.With(slog.String("provider_idempotency_key", p.ProviderIdempotencyKey), slog.String("intent_id", out.intentID))

	switch out.kind {
	case outcomeSucceeded:
		log.InfoContext(ctx, "payment succeeded")
		return w.finish(ctx, job, p, StatusSucceeded, out)
	case outcomeDeclined:
		log.InfoContext(ctx, "payment declined", slog.String("code", out.code), slog.String("decline_code", out.declineCode))
		return w.finish(ctx, job, p, StatusFailed, out)
	case outcomeRejected:
		log.WarnContext(ctx, "provider rejected payment", slog.String("code", out.code), slog.String("param", out.param), slog.Any("error", out.err))
		return w.finish(ctx, job, p, StatusFailed, out)
	case outcomePending:
		if age <= w.cfg.MaxPollDuration {
			if err := recordPending(ctx, w.pool, p.ID, out); err != nil {
				return err
			}
			log.InfoContext(ctx, "payment pending at the provider; polling", slog.String("intent_status", string(out.intentStatus)))
			return river.JobSnooze(w.cfg.PollInterval)
		}
		if out.intentStatus == stripe.PaymentIntentStatusProcessing {
			// The provider is settling it; only it knows how this ends.
			log.WarnContext(ctx, "payment still processing at the provider; giving up polling")
			return w.reconcileLater(ctx, job, p, "the payment stayed processing at the provider")
		}
		// Waiting for the customer (3-D Secure) that never came. Nothing was
		// charged, and canceling makes sure nothing will be.
		log.WarnContext(ctx, "customer action not completed in time; canceling the intent", slog.String("intent_status", string(out.intentStatus)))
		canceled := cancelIntent(ctx, w.stripe, out.intentID, p.ProviderIdempotencyKey)
		if canceled.kind != outcomeDeclined {
			return w.retryOrReconcile(ctx, job, p, log, canceled.err)
		}
		return w.finish(ctx, job, p, StatusFailed, canceled)
	case outcomeKeyReused:
		log.ErrorContext(ctx, "BUG: provider saw this payment's idempotency key with other parameters", slog.Any("error", out.err))
		return w.reconcileLater(ctx, job, p, "the provider reported an idempotency key conflict")
	default:
		return w.retryOrReconcile(ctx, job, p, log, out.err)
	}
}

// retryOrReconcile fails the attempt so River retries it with the same
// key, unless it was the last attempt: then the payment goes to
// reconciliation, because a discarded job would leave it processing forever.
func (w *ChargeWorker) retryOrReconcile(ctx context.Context, job *river.Job[outbox.ChargePaymentArgs], p Payment, log *slog.Logger, err error) error {
	if job.Attempt >= job.MaxAttempts {
		log.ErrorContext(ctx, "provider attempts exhausted; outcome unknown", slog.Any("error", err))
		return w.reconcileLater(ctx, job, p, "the provider could not be reached after every retry")
	}
	log.WarnContext(ctx, "provider outcome undetermined; will retry with the same key", slog.Any("error", err))
	return fmt.Errorf("charge payment %s: %w", p.ID, err)
}

// recordTimeout bounds the writes that record a provider answer.
const recordTimeout = 10 * time.Second

// providerCallTimeout leaves a fifth of the job timeout (at most 5s) for
// recording the answer.
func (w *ChargeWorker) providerCallTimeout() time.Duration {
	return w.cfg.JobTimeout - min(w.cfg.JobTimeout/5, 5*time.Second)
}

// finish records a final outcome: the payment's state, the response that
// retries of the client's request will replay, and the job's completion, in
// one transaction, so none of them is ever seen without the others.
func (w *ChargeWorker) finish(ctx context.Context, job *river.Job[outbox.ChargePaymentArgs], p Payment, status Status, out providerOutcome) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		final, changed, err := finalizePayment(ctx, tx, p.TenantID, p.ID, status, out)
		if err != nil {
			return err
		}
		if changed {
			resp, err := finalResponse(final, out.kind)
			if err != nil {
				return err
			}
			if err := w.keys.Complete(ctx, tx, p.TenantID, p.IdempotencyKey, resp); err != nil {
				return fmt.Errorf("complete idempotency key: %w", err)
			}
		}
		return completeJob(ctx, tx, job)
	})
}

// reconcileLater gives up on determining the outcome automatically: the
// payment needs reconciliation and the client's key answers 409 until then.
func (w *ChargeWorker) reconcileLater(ctx context.Context, job *river.Job[outbox.ChargePaymentArgs], p Payment, reason string) error {
	return pgx.BeginTxFunc(ctx, w.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		changed, err := markRequiresReconciliation(ctx, tx, p.TenantID, p.ID, reason)
		if err != nil {
			return err
		}
		if changed {
			if err := w.keys.MarkUnknown(ctx, tx, p.TenantID, p.IdempotencyKey); err != nil {
				return fmt.Errorf("mark idempotency key unknown: %w", err)
			}
		}
		return completeJob(ctx, tx, job)
	})
}

func completeJob(ctx context.Context, tx pgx.Tx, job *river.Job[outbox.ChargePaymentArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete job: %w", err)
	}
	return nil
}

// finalResponse is what a retry of the client's POST replays once the
// payment is final: 201 with the payment, or a problem that names it.
func finalResponse(p Payment, kind outcomeKind) (idempotency.Response, error) {
	if p.Status == StatusSucceeded {
		body, err := json.Marshal(p)
		if err != nil {
			return idempotency.Response{}, fmt.Errorf("encode payment: %w", err)
		}
		return idempotency.Response{
			StatusCode: http.StatusCreated,
			Header:     map[string]string{"Content-Type": "application/json", "Location": "/v1/payments/" + p.ID},
			Body:       body,
		}, nil
	}
	code, decline := deref(p.FailureCode), deref(p.DeclineCode)
	pe := &problem.Error{
		Type:       problem.ProviderRejected,
		Detail:     fmt.Sprintf("The payment provider rejected payment %s (%s): %s", p.ID, code, deref(p.FailureMessage)),
		Extensions: map[string]any{"payment_id": p.ID, "provider_code": code},
	}
	if kind == outcomeDeclined {
		pe.Type = problem.CardDeclined
		pe.Detail = fmt.Sprintf("The card was declined (%s); payment %s is failed.", cmp.Or(decline, code), p.ID)
		pe.Extensions["decline_code"] = decline
	}
	return idempotency.Response{
		StatusCode: pe.Type.Status,
		Header:     map[string]string{"Content-Type": problem.ContentType},
		Body:       pe.Marshal(),
	}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
