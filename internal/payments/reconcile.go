package payments

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// Reconciler settles payments in requires_reconciliation by looking their
// charge up at the provider, never by charging (operation.Reconciler): by
// intent id when one is known, else by the payment_id metadata (search,
// then a consistent list of the window in which the intent can have been
// created). An intent still waiting for a customer action that never came
// is canceled after MaxActionWait.
type Reconciler struct {
	*operation.Reconciler[claim, provider.Outcome]
	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	cfg      operation.ReconcileConfig
}

// paymentsTable is where the engine finds payments.
var paymentsTable = operation.Table{
	Operation: "payment", Name: "payments",
	ProviderIDColumn: "provider_payment_intent_id", ProviderIDLog: "intent_id",
	Columns:           paymentColumns,
	Listed:            "intents",
	NotReachedMessage: notReachedMessage, AlsoClear: ", decline_code = NULL, finalized_at = NULL", Resumed: string(StatusProcessing),
	InFlight: texts(inFlight),
	NotFound: ErrNotFound,
	// An authorization still holds money a capture or a cancel acts on;
	// what a succeeded payment captured, less its refunds, a refund may
	// still give back from its account.
	Open: `status = '` + string(StatusRequiresCapture) + `' OR (status = '` + string(StatusSucceeded) + `' AND amount_refunded < amount_captured)`,
}

// NewReconciler returns a Reconciler.
func NewReconciler(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.ReconcileConfig) *Reconciler {
	r := &Reconciler{pool: pool, keys: keys, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
	r.Reconciler = operation.NewReconciler(pool, keys, logger, cfg, paymentsTable, reconcilable{paymentLocks{keys}, r})
	return r
}

// claim is a payment as the reconciler claims it, with whether its
// attempt window has settled by the database's clock.
type claim struct {
	Payment
	Settled bool `db:"settled"`
}

// reconcilable is what payments supply to the engine's reconciler.
type reconcilable struct {
	paymentLocks
	r *Reconciler
}

func (k reconcilable) Entry(c claim) operation.Entry { return c.Payment.Entry() }

func (k reconcilable) RecordFinal(ctx context.Context, tx pgx.Tx, c claim, out provider.Outcome) error {
	return recordOutcome(ctx, tx, k.r.keys, c.Payment, []Status{StatusRequiresReconciliation}, out)
}

// LookUp looks the charge up; an intent waiting for a customer action for
// longer than MaxActionWait is canceled, and the cancel is the outcome.
func (k reconcilable) LookUp(ctx context.Context, c claim) (provider.Outcome, operation.Look) {
	r, p := k.r, c.Payment
	out, absent, note := r.lookUp(ctx, p, c.Settled)
	if leftOpen(out) {
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		out = closeIntent(callCtx, r.provider, p, out)
		cancel()
		note = "closing the declined intent: " + errText(out.Err)
	}
	switch {
	case out.Kind == provider.Succeeded || out.Kind == provider.Declined || out.Kind == provider.Authorized:
		return out, operation.Look{Found: operation.Final, ProviderID: out.IntentID()}
	case out.Kind == provider.Pending && out.Intent.Status == stripe.PaymentIntentStatusRequiresAction &&
		time.Since(*p.FirstProviderAttemptAt) > r.cfg.MaxActionWait:
		r.logger.WarnContext(ctx, "customer action not completed in time; canceling the intent",
			slog.String("payment_id", p.ID), slog.String("intent_id", out.IntentID()))
		callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		closed := closeIntent(callCtx, r.provider, p, out)
		cancel()
		switch closed.Kind {
		case provider.Succeeded, provider.Declined, provider.Authorized:
			return closed, operation.Look{Found: operation.Final, ProviderID: closed.IntentID()}
		case provider.Pending:
			return closed, operation.Look{Found: operation.Pending, ProviderID: closed.IntentID()}
		}
		return closed, operation.Look{ProviderID: out.IntentID(), Note: "canceling the intent failed: " + errText(closed.Err), Err: closed.Err}
	case out.Kind == provider.Pending:
		return out, operation.Look{Found: operation.Pending, ProviderID: out.IntentID()}
	case absent:
		return out, operation.Look{Found: operation.Absent}
	}
	return out, operation.Look{ProviderID: out.IntentID(), Note: note, Err: out.Err}
}

// lookUp asks the provider what became of p's charge. absent is the proof
// that no intent was created for p's generation; otherwise an Ambiguous
// outcome carries in note why the look could not tell.
func (r *Reconciler) lookUp(ctx context.Context, p Payment, settled bool) (out provider.Outcome, absent bool, note string) {
	callCtx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if p.ProviderPaymentIntentID != nil {
		out := r.provider.For(p.Account()).RetrieveIntent(callCtx, *p.ProviderPaymentIntentID)
		return out, false, "reading intent " + *p.ProviderPaymentIntentID + ": " + errText(out.Err)
	}
	last := *p.FirstProviderAttemptAt
	if p.LastProviderAttemptAt != nil {
		last = *p.LastProviderAttemptAt
	}
	// The last request ended by its attempt's deadline, as its worker
	// stamped it (the longest a worker allows, for an older row).
	deadline := last.Add(operation.MaxJobTimeout)
	if p.ProviderAttemptDeadline != nil {
		deadline = *p.ProviderAttemptDeadline
	}
	// By its ref, search also finds the intent of an earlier life of the
	// payment whose rows were lost: made before this generation's first
	// attempt, it is searchable (search lags by a minute at most) by the
	// time the window settles, so the list of the window, which proves
	// absence, needs not reach back to it.
	key, value := paymentsTable.FoundBy(p.Entry())
	found, err := r.provider.For(p.Account()).FindIntents(callCtx, provider.Find{
		MetadataKey: key, MetadataValue: value,
		CreatedFrom: p.FirstProviderAttemptAt.Add(-r.cfg.ClockSkew),
		CreatedTo:   deadline.Add(r.cfg.ClockSkew),
		Scan:        true,
	})
	if err != nil {
		return provider.Outcome{Kind: provider.Ambiguous, Err: err}, false, "looking the intent up failed"
	}
	var mine []*provider.Intent
	for _, in := range found.Intents {
		if paymentsTable.MadeFor(in.Metadata, p.Entry()) {
			mine = append(mine, in)
		}
	}
	switch {
	case len(mine) == 1:
		// Search results can be stale: read the intent itself.
		out := r.provider.For(p.Account()).RetrieveIntent(callCtx, mine[0].ID)
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

// notReachedMessage is what the payment shows once proven never charged.
const notReachedMessage = "The payment never reached the payment provider and nothing was charged. " +
	"Retry the request with the same Idempotency-Key to charge it."
