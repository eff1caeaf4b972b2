package console

import (
	"cmp"
	"context"
	"slices"
	"time"

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
			ProviderObjectID: r.ProviderRefundID, Generation: r.ProviderKeyGeneration, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()})
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
			CreatedAt: act.CreatedAt.UTC(), UpdatedAt: act.UpdatedAt.UTC()})
	}
	slices.SortStableFunc(ops[1:], func(x, y Operation) int { return x.CreatedAt.Compare(y.CreatedAt) })
	return ops, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
