package console

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/refunds"
)

// Operation is one provider operation of a payment: its charge, a refund, a
// capture or a cancel, as an operator sees it.
type Operation struct {
	Operation        string    `json:"operation"`
	ID               string    `json:"id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	IdempotencyKey   string    `json:"idempotency_key"`
	ProviderObjectID *string   `json:"provider_object_id"`
	Generation       int       `json:"generation"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	// Job names the operation's jobs: its kind's job arguments.
	Job river.JobArgs `json:"-"`
}

// OperationsOf lists p's operations: its charge first, then its refunds,
// captures and cancels as they were made.
func OperationsOf(ctx context.Context, db operation.Querier, p payments.Payment) ([]Operation, error) {
	ops := []Operation{{Operation: "payment", ID: p.ID, Status: string(p.Status), Amount: p.Amount, IdempotencyKey: p.IdempotencyKey,
		ProviderObjectID: p.ProviderPaymentIntentID, Generation: p.ProviderKeyGeneration, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}}
	list, err := refunds.OfPayment(ctx, db, p.TenantID, p.ID)
	if err != nil {
		return nil, err
	}
	for _, r := range list {
		ops = append(ops, Operation{Operation: "refund", ID: r.ID, Status: string(r.Status), Amount: r.Amount, IdempotencyKey: r.IdempotencyKey,
			ProviderObjectID: r.ProviderRefundID, Generation: r.ProviderKeyGeneration, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
			Job: refunds.RefundPaymentArgs{TenantID: r.TenantID, RefundID: r.ID}})
	}
	actions, err := authorizations.OfPayment(ctx, db, p.TenantID, p.ID)
	if err != nil {
		return nil, err
	}
	for _, act := range actions {
		amount := int64(0)
		if act.Kind == authorizations.Capture {
			amount = cmp.Or(deref(act.AmountToCapture), p.Amount)
		}
		intent := act.ProviderPaymentIntentID
		ops = append(ops, Operation{Operation: string(act.Kind), ID: act.ID, Status: string(act.Status), Amount: amount,
			IdempotencyKey: act.IdempotencyKey, ProviderObjectID: &intent, Generation: act.ProviderKeyGeneration,
			CreatedAt: act.CreatedAt.UTC(), UpdatedAt: act.UpdatedAt.UTC(),
			Job: authorizations.ActPaymentArgs{TenantID: act.TenantID, ActionID: act.ID}})
	}
	slices.SortStableFunc(ops[1:], func(x, y Operation) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return ops, nil
}

// AddOperationJobs adds to d's jobs (the charge's) those of its payment's
// other operations (ops from OperationsOf), in the order River made them:
// every attempt of a refund, a capture or a cancel shows under its
// payment.
func AddOperationJobs(ctx context.Context, db operation.Querier, d *payments.Detail, ops []Operation) error {
	var of []river.JobArgs
	for _, op := range ops {
		if op.Job != nil {
			of = append(of, op.Job)
		}
	}
	jobs, err := operation.JobsOf(ctx, db, of...)
	if err != nil {
		return err
	}
	d.Jobs = append(d.Jobs, jobs...)
	slices.SortFunc(d.Jobs, func(a, b payments.Job) int { return cmp.Compare(a.ID, b.ID) })
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
