package authorizations

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// Worker sends captures and cancels on the engine's worker.
type Worker = operation.Worker[ActPaymentArgs, Action, provider.Outcome]

// NewWorker returns the worker of captures and cancels, with every kind's
// timers (operation.WorkerConfig).
func NewWorker(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger, cfg operation.WorkerConfig) *Worker {
	return operation.NewWorker(pool, keys, logger, cfg, "payment action", actionsTable,
		attemptable{actionLocks: actionLocks{keys}, provider: pc})
}

// actionLocks is how the engine reads and locks an action.
type actionLocks struct{ keys *idempotency.Store }

func (actionLocks) Load(ctx context.Context, db operation.Querier, tenantID, id string) (Action, error) {
	return GetAction(ctx, db, tenantID, id)
}

func (actionLocks) Entry(a Action) operation.Entry { return entryOf(a) }

// Lock takes the payment's lock, then the action's, then its key's.
func (l actionLocks) Lock(ctx context.Context, tx pgx.Tx, tenantID, id string) error {
	_, _, err := lockForOutcome(ctx, tx, l.keys, tenantID, id)
	return err
}

// attemptable is what captures and cancels supply to the engine's worker.
type attemptable struct {
	actionLocks
	provider *provider.Client
}

func (attemptable) Of(args ActPaymentArgs) (string, string) { return args.TenantID, args.ActionID }

// Send captures or cancels the payment's intent under the action's key, on
// the payment's account. A refusal is read again, so the payment is
// recorded as the intent now stands (an authorization the provider voided
// makes it canceled).
func (k attemptable) Send(ctx context.Context, a Action) (provider.Outcome, error) {
	pc := k.provider.For(deref(a.ProviderAccount))
	var out provider.Outcome
	if a.Kind == Capture {
		out = pc.CaptureIntent(ctx, a.ProviderPaymentIntentID, deref(a.AmountToCapture), a.ProviderIdempotencyKey)
	} else {
		out = pc.CancelAuthorization(ctx, a.ProviderPaymentIntentID, deref(a.CancellationReason), a.ProviderIdempotencyKey)
	}
	if out.Kind == provider.Rejected {
		if read := pc.RetrieveIntent(ctx, a.ProviderPaymentIntentID); read.Err == nil {
			out.Intent = read.Intent
		}
	}
	return out, nil
}

func (attemptable) Judge(out provider.Outcome) operation.Judged { return operation.JudgeIntent(out) }

// RecordPending is never needed: a capture or a cancel answers at once.
func (attemptable) RecordPending(context.Context, operation.Querier, Action, provider.Outcome) error {
	return nil
}

func (k attemptable) RecordFinal(ctx context.Context, tx pgx.Tx, a Action, out provider.Outcome) error {
	p, locked, err := lockForOutcome(ctx, tx, k.keys, a.TenantID, a.ID)
	if err != nil {
		return err
	}
	return recordOutcome(ctx, tx, k.keys, p, locked, out)
}

// entryOf is what the engine reads of an action.
func entryOf(a Action) operation.Entry {
	return operation.Entry{TenantID: a.TenantID, ID: a.ID, IdempotencyKey: a.IdempotencyKey, Status: string(a.Status), Generation: a.ProviderKeyGeneration,
		FirstAttemptAt: a.FirstProviderAttemptAt, ReconcileAttempts: a.ReconcileAttempts,
		LogAttrs: []any{slog.String("payment_id", a.PaymentID), slog.String("action", string(a.Kind)),
			slog.String("provider_idempotency_key", a.ProviderIdempotencyKey)}}
}

// outcomeOfIntent is what the intent's state says of action a: the
// capture happened (succeeded), the cancel happened (canceled), or the
// other one did (refused); held says the authorization is still held:
// neither happened.
func outcomeOfIntent(a Action, in *provider.Intent) (out provider.Outcome, held bool) {
	out = provider.Outcome{Intent: in}
	switch in.Status {
	case stripe.PaymentIntentStatusRequiresCapture:
		return out, true
	case stripe.PaymentIntentStatusSucceeded:
		out.Kind = provider.Succeeded
	case stripe.PaymentIntentStatusCanceled:
		out.Kind = provider.Succeeded
	default:
		out.Kind = provider.Ambiguous
		return out, false
	}
	if (a.Kind == Capture) != (in.Status == stripe.PaymentIntentStatusSucceeded) {
		out.Kind, out.Code = provider.Rejected, "payment_intent_unexpected_state"
		out.Message = "the authorization was " + string(in.Status) + " before this " + string(a.Kind)
	}
	return out, false
}
