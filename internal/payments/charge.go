package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/provider"
)

// NewChargeWorker returns the engine's worker of charge_payment jobs: it
// charges a payment at the provider exactly once and records the outcome.
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
func NewChargeWorker(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger,
	cfg operation.WorkerConfig) river.Worker[args] {
	env := operation.Env{Pool: pool, Keys: keys, Provider: pc, Logger: logger, Worker: cfg}
	return operation.NewWorker[args](env, payment{}.Name(), "charge", paymentsTable, newChargeable(pool, keys, pc))
}

func newChargeable(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client) chargeable {
	return chargeable{Rows: rowsOf(keys), pool: pool, provider: pc}
}

// chargeable is what payments supply to the engine's worker.
type chargeable struct {
	operation.Rows[Payment]
	pool     *pgxpool.Pool
	provider *provider.Client
}

// Send creates the payment's intent, or reads the one an earlier attempt
// found; a decline that leaves the intent open is closed before it is
// answered (closeIntent).
func (k chargeable) Send(ctx context.Context, p Payment) (provider.Outcome, error) {
	var out provider.Outcome
	if p.ProviderPaymentIntentID != nil {
		out = k.provider.For(p.Account()).RetrieveIntent(ctx, *p.ProviderPaymentIntentID)
	} else {
		out = k.provider.For(p.Account()).CreateIntent(ctx, chargeOf(p))
	}
	if leftOpen(out) {
		out = closeIntent(ctx, k.provider, p, out)
	}
	return out, nil
}

// RecordPending records a pending answer. Only the poll at which the
// payment starts waiting for its customer takes the locks (payment row,
// then key) to refresh the key's stored 202; every other poll is one
// UPDATE.
func (k chargeable) RecordPending(ctx context.Context, db operation.Querier, p Payment, out provider.Outcome) error {
	if out.Intent == nil || out.Intent.Status != stripe.PaymentIntentStatusRequiresAction || p.Status == StatusRequiresAction {
		return recordPending(ctx, db, p, out)
	}
	return postgres.InTx(ctx, k.pool, func(tx pgx.Tx) error {
		locked, err := k.Locked(ctx, tx, p.TenantID, p.ID)
		if err != nil {
			return err
		}
		return notePending(ctx, tx, k.Keys, locked, out)
	})
}

// RecordFinal records a final answer. Its locks come with its writes:
// recordOutcome's UPDATE of the payment (conditional on its state) takes
// the payment's lock, then its UPDATE of the key the key's, in the one
// lock order.
func (k chargeable) RecordFinal(ctx context.Context, tx pgx.Tx, p Payment, out provider.Outcome) error {
	return recordOutcome(ctx, tx, k.Keys, p, out)
}

// Abandon cancels an intent still waiting, past polling, for a customer
// action (3-D Secure) that never came: nothing was charged, and canceling
// makes sure nothing will be. Any other pending state is the provider's to
// settle, and goes to the reconciler.
func (k chargeable) Abandon(ctx context.Context, p Payment, pending provider.Outcome) (provider.Outcome, bool) {
	if pending.Intent == nil || pending.Intent.Status != stripe.PaymentIntentStatusRequiresAction {
		return pending, false
	}
	// Not canceled, the customer having gone on meanwhile: what the intent
	// then is; a processing intent's next attempt reads it again.
	return closeIntent(ctx, k.provider, p, pending), true
}

// inFlight are the states in which the charge still waits on the provider
// (paymentsTable.InFlight); its final answer moves a payment from them, or
// from requires_reconciliation (paymentsTable.Answering).
var inFlight = []Status{StatusProcessing, StatusRequiresAction}

// recordOutcome records a final provider outcome for p (a payment still
// answering: paymentsTable.Answering): the payment's final state and the
// idempotency key's final response. The caller holds the payment's locks
// (Rows.Locked). A payment that already left those states (another run
// recorded it) is left alone.
func recordOutcome(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, p Payment, out provider.Outcome) error {
	if leftOpen(out) {
		return fmt.Errorf("BUG: payment %s: intent %s is still %s: cancel it (closeIntent) before recording the decline",
			p.ID, out.IntentID(), out.Intent.Status)
	}
	status := StatusFailed
	switch {
	case out.Kind == provider.Succeeded:
		status = StatusSucceeded
	case out.Kind == provider.Authorized:
		status = StatusRequiresCapture
	case out.Intent != nil && out.Intent.ReleasedAuthorization:
		// Authorized, then released (by a cancel whose own record was
		// lost, or by the provider): the create did authorize, and the
		// payment ends as a released authorization does.
		status = StatusCanceled
	}
	final, changed, err := finalizePayment(ctx, tx, p, nil, status, out)
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

// finalResponse is what a retry of the client's POST replays once the
// payment is final: 201 with the payment (charged, authorized, or
// authorized and since released), or a problem that names it.
func finalResponse(p Payment, kind provider.Kind) (idempotency.Response, error) {
	if p.Status == StatusSucceeded || p.Status == StatusRequiresCapture || p.Status == StatusCanceled {
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
