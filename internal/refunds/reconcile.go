package refunds

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// Reconciler settles refunds in requires_reconciliation by looking them up
// at the provider, never by refunding (operation.Reconciler): by provider
// refund id when one is known, else among the payment intent's refunds
// (the list endpoint, which is consistent) by refund_id and
// refund_generation metadata.
type Reconciler = operation.Reconciler[claim, provider.RefundOutcome]

// refundsTable is where the engine finds refunds.
var refundsTable = operation.Table{
	Operation: "refund", Name: "refunds",
	ProviderIDColumn: "provider_refund_id", ProviderIDLog: "provider_refund_id",
	ClaimColumns: func(settled string) string {
		return refundColumns + `,
			(SELECT provider_payment_intent_id FROM payments WHERE payments.id = refunds.payment_id) AS intent_id, ` + settled
	},
	NotReachedMessage: notReachedMessage,
	Resumed:           string(StatusPending),
	InFlight:          []string{string(StatusPending)},
	NotFound:          ErrNotFound,
	Parent:            &operation.Parent{Table: "payments", Column: "payment_id"},
}

// NewReconciler returns a refund Reconciler, with the settings of every
// operation kind's reconciler.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.ReconcileConfig) *Reconciler {
	return operation.NewReconciler(pool, keys, logger, cfg, refundsTable, newReconcilable(pool, keys, pc, cfg))
}

func newReconcilable(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, cfg operation.ReconcileConfig) reconcilable {
	return reconcilable{refundLocks: refundLocks{keys}, pool: pool, provider: pc, cfg: cfg.WithDefaults()}
}

// claim is a refund as the reconciler claims it, with its payment's
// intent and whether its attempt window has settled by the database's
// clock.
type claim struct {
	Refund
	IntentID *string `db:"intent_id"`
	Settled  bool    `db:"settled"`
}

// reconcilable is what refunds supply to the engine's reconciler.
type reconcilable struct {
	refundLocks
	pool     *pgxpool.Pool
	provider *provider.Client
	cfg      operation.ReconcileConfig
}

func (k reconcilable) Entry(c claim) operation.Entry { return entryOf(c.Refund) }

// RecordFinal records a final outcome found by reconciliation, as the
// worker would, under the one lock order.
func (k reconcilable) RecordFinal(ctx context.Context, c claim, out provider.RefundOutcome) error {
	return postgres.InTx(ctx, k.pool, func(tx pgx.Tx) error {
		if _, err := lockForOutcome(ctx, tx, k.keys, c.TenantID, c.ID); err != nil {
			return err
		}
		_, _, err := recordOutcome(ctx, tx, k.keys, c.Refund, out)
		return err
	})
}

// LookUp asks the provider what became of the refund.
func (k reconcilable) LookUp(ctx context.Context, c claim) (provider.RefundOutcome, operation.Look) {
	out, absent, note := k.lookUp(ctx, c)
	switch {
	case out.Kind == provider.Succeeded || out.Kind == provider.Declined:
		return out, operation.Look{Found: operation.Final, ProviderID: out.RefundID()}
	case out.Kind == provider.Pending:
		return out, operation.Look{Found: operation.Pending, ProviderID: out.RefundID()}
	case absent:
		return out, operation.Look{Found: operation.Absent}
	}
	return out, operation.Look{ProviderID: out.RefundID(), Note: note, Err: out.Err}
}

// lookUp asks the provider what became of the refund. absent is the proof
// that none was created for its generation; otherwise an Ambiguous outcome
// carries in note why the look could not tell.
func (r reconcilable) lookUp(ctx context.Context, c claim) (out provider.RefundOutcome, absent bool, note string) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if c.ProviderRefundID != nil {
		out := r.provider.For(c.Account()).RetrieveRefund(callCtx, *c.ProviderRefundID)
		return out, false, "reading refund " + *c.ProviderRefundID + ": " + errText(out.Err)
	}
	if c.IntentID == nil {
		return provider.RefundOutcome{Kind: provider.Ambiguous}, false, "the refund's payment has no payment intent"
	}
	found, err := r.provider.For(c.Account()).ListRefunds(callCtx, *c.IntentID, MetadataRefundID, c.ID, 0)
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

// notReachedMessage is what the refund shows once proven never sent.
const notReachedMessage = "The refund never reached the payment provider and nothing was refunded. " +
	"Retry the request with the same Idempotency-Key to refund it."
