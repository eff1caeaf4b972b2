package refunds

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// Worker works refund_payment jobs on the engine's worker: a refund is made
// at the provider exactly once, under a key derived from the refund and its
// generation, and its outcome, the key's final response and the job's
// completion commit together. It has every kind's timers (operation.WorkerConfig).
type Worker = operation.Worker[RefundPaymentArgs, Refund, provider.RefundOutcome]

// NewWorker returns a refund worker.
func NewWorker(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.WorkerConfig) *Worker {
	return operation.NewWorker(pool, keys, logger, cfg, "refund", refundsTable,
		attemptable{refundLocks: refundLocks{keys}, pool: pool, provider: pc})
}

// refundLocks is how the engine reads and locks a refund.
type refundLocks struct{ keys *idempotency.Store }

func (refundLocks) Load(ctx context.Context, db operation.Querier, tenantID, id string) (Refund, error) {
	return GetRefund(ctx, db, tenantID, id)
}

func (refundLocks) Entry(r Refund) operation.Entry { return entryOf(r) }

// Lock takes the payment's lock, then the refund's, then its key's.
func (l refundLocks) Lock(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	_, err := lockForOutcome(ctx, tx, l.keys, tenantID, id)
	return err
}

// attemptable is what refunds supply to the engine's worker.
type attemptable struct {
	refundLocks
	pool     *pgxpool.Pool
	provider *provider.Client
}

func (attemptable) Of(args RefundPaymentArgs) (string, string) { return args.TenantID, args.RefundID }

// Send refunds the payment's intent, or reads the provider refund an
// earlier attempt found.
func (k attemptable) Send(ctx context.Context, r Refund) (provider.RefundOutcome, error) {
	if r.ProviderRefundID != nil {
		return k.provider.For(r.Account()).RetrieveRefund(ctx, *r.ProviderRefundID), nil
	}
	p, err := payments.GetPayment(ctx, k.pool, r.TenantID, r.PaymentID)
	if err != nil {
		return provider.RefundOutcome{}, err
	}
	if p.ProviderPaymentIntentID == nil {
		// Refunds are accepted only for succeeded payments, which have one.
		return provider.RefundOutcome{}, &operation.HandOverError{Reason: "the refund's payment has no payment intent"}
	}
	return k.provider.For(r.Account()).CreateRefund(ctx, requestOf(r, *p.ProviderPaymentIntentID)), nil
}

func (attemptable) Judge(out provider.RefundOutcome) operation.Judged {
	j := operation.Judged{Kind: out.Kind, Replayed: out.Replayed, HTTPStatus: out.HTTPStatus, ProviderID: out.RefundID(),
		Code: out.Code, Err: out.Err}
	if out.Refund != nil {
		j.State = string(out.Refund.Status)
	}
	return j
}

func (attemptable) RecordPending(ctx context.Context, db operation.Querier, r Refund, out provider.RefundOutcome) error {
	return recordPending(ctx, db, r, out.RefundID())
}

func (k attemptable) RecordFinal(ctx context.Context, tx pgx.Tx, r Refund, out provider.RefundOutcome) error {
	_, _, err := recordOutcome(ctx, tx, k.keys, r, out)
	return err
}

// entryOf is what the engine reads of a refund.
func entryOf(r Refund) operation.Entry {
	return operation.Entry{TenantID: r.TenantID, ID: r.ID, IdempotencyKey: r.IdempotencyKey, Status: string(r.Status), Generation: r.ProviderKeyGeneration,
		FirstAttemptAt: r.FirstProviderAttemptAt, ReconcileAttempts: r.ReconcileAttempts,
		LogAttrs: []any{slog.String("payment_id", r.PaymentID), slog.String("provider_idempotency_key", r.ProviderIdempotencyKey)}}
}
