package payments

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// What the payments kind answers about its provider's events, as SQL over
// its own table: the webhooks package stores and sweeps events with these
// conditions and writes none against payments itself.

// finalStatuses are the final payment statuses event types tell of: only
// states an intent never leaves.
var finalStatuses = []struct {
	eventType string
	status    Status
}{
	{"payment_intent.succeeded", StatusSucceeded},
	{"payment_intent.canceled", StatusCanceled},
}

// FinalStatusOfEvent is the final payment status an event type tells of,
// or "" for a type that tells of none an intent never leaves.
func FinalStatusOfEvent(eventType string) Status {
	for _, f := range finalStatuses {
		if f.eventType == eventType {
			return f.status
		}
	}
	return ""
}

// FinalStatusOfEventSQL is FinalStatusOfEvent as SQL, of the event type in
// column: NULL for a type that tells of none.
func FinalStatusOfEventSQL(column string) string {
	var b strings.Builder
	b.WriteString("CASE " + column)
	for _, f := range finalStatuses {
		fmt.Fprintf(&b, " WHEN '%s' THEN '%s'", f.eventType, f.status)
	}
	b.WriteString(" END")
	return b.String()
}

// RecordsSQL is the SQL condition that a payment records the status (an
// expression) for the intent on the account (expressions too; the
// platform's own account is the empty string): then an event telling of
// that status changes nothing. A canceled intent is also what a failed
// payment records: its decline, or its customer's abandoned action, closed
// by a cancel.
func RecordsSQL(intent, account, status string) string {
	return `EXISTS (SELECT FROM payments WHERE provider_payment_intent_id = ` + intent +
		` AND coalesce(provider_account, '') = ` + account + ` AND (status = ` + status +
		` OR (` + status + ` = '` + string(StatusCanceled) + `' AND status = '` + string(StatusFailed) + `')))`
}

// ChargeAwaitedSQL is the SQL condition that the payment an intent's event
// names (its metadata, which the charge wrote: payload is the event's JSON)
// is on account and still waits for its charge's first answer: processing,
// with no intent recorded. The charge then records the provider's answer
// itself, usually within milliseconds, and reading the intent again for
// the event would only repeat it. Once an answer is recorded (a pending
// intent included), events go the usual way: a pending intent settles
// later, and its event is how the service hears of it.
func ChargeAwaitedSQL(payload, account string) string {
	metadata := `(` + payload + `)->'data'->'object'->'metadata'`
	return `EXISTS (SELECT FROM payments WHERE tenant_id = ` + metadata + `->>'` + MetadataTenantID + `'
		AND id = ` + metadata + `->>'` + MetadataPaymentID + `'
		AND coalesce(provider_account, '') = ` + account + `
		AND status = '` + string(StatusProcessing) + `' AND provider_payment_intent_id IS NULL)`
}

// intentEvents are the provider events the payments kind answers: its
// intents'. A manual-capture payment authorized is
// payment_intent.amount_capturable_updated: it awaits capture.
var intentEvents = []string{"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled",
	"payment_intent.requires_action", "payment_intent.processing", "payment_intent.amount_capturable_updated"}

// shortcuts are what let the webhooks store most intent events without a
// job: those telling of a final state the payment records, and those
// arriving while the charge is about to record the provider's answer.
type shortcuts struct{}

func (shortcuts) Told(eventType, objectID, account string) string {
	return RecordsSQL(objectID, account, FinalStatusOfEventSQL(eventType))
}

func (shortcuts) Awaited(payload, account string) string { return ChargeAwaitedSQL(payload, account) }

// settleEvent reads the event's intent from the provider and settles its
// payment from that answer, never from the event's copy.
func settleEvent(ctx context.Context, env operation.Env, ev operation.Event) (string, error) {
	if agrees, err := finalAsTold(ctx, env.Pool, ev); err != nil || agrees {
		return Unchanged, err
	}
	out := env.Provider.For(ev.Account).RetrieveIntent(ctx, ev.ObjectID)
	if out.Kind == provider.Ambiguous && out.HTTPStatus == http.StatusNotFound {
		return operation.NotOurs, nil // not an intent this account knows
	}
	if out.Kind == provider.Ambiguous {
		return "", fmt.Errorf("read intent %s: %w", ev.ObjectID, out.Err)
	}
	// A declined intent is still confirmable: its payment is final only
	// once it is canceled.
	out, err := CloseIntent(ctx, env.Pool, env.Provider, ev.Account, out)
	if err != nil {
		return "", err
	}
	if out.Kind == provider.Ambiguous {
		return "", fmt.Errorf("close intent %s: %w", ev.ObjectID, out.Err)
	}
	s, err := Settle(ctx, env.Pool, env.Keys, ev.Account, out)
	if err != nil {
		return "", err
	}
	log := env.Logger.With(slog.String("tenant_id", s.Payment.TenantID), slog.String("payment_id", s.Payment.ID),
		slog.String("intent_id", ev.ObjectID), slog.String("intent_status", string(out.Intent.Status)),
		slog.String("payment_status", string(s.Payment.Status)))
	switch s.Verdict {
	case Recorded:
		log.InfoContext(ctx, "payment settled from the provider's intent")
	case Contradiction:
		evidence := map[string]any{
			"event_id": ev.ID, "event_type": ev.Type, "reason": s.Reason,
			"intent": map[string]any{
				"id": ev.ObjectID, "status": out.Intent.Status, "amount": out.Intent.Amount, "currency": out.Intent.Currency,
				"metadata": out.Intent.Metadata,
			},
			"payment": map[string]any{
				"status": s.Payment.Status, "generation": s.Payment.ProviderKeyGeneration,
				"provider_payment_intent_id": s.Payment.ProviderPaymentIntentID, "failure_code": s.Payment.FailureCode,
			},
		}
		isNew, err := ledger.Record(ctx, env.Pool, s.Kind, s.Payment.ID, ev.ObjectID, evidence)
		if err != nil {
			return "", err
		}
		log.ErrorContext(ctx, "the provider contradicts the payment's recorded state; left for an operator",
			slog.String("finding", s.Kind), slog.String("reason", s.Reason), slog.Bool("new_finding", isNew))
	}
	return s.Verdict, nil
}

// finalAsTold reports whether ev (an intent's event) tells of a final
// state its payment already records, for the intent the payment records:
// then nothing could change, and neither the provider nor the payment's
// lock is needed. Only states an intent never leaves count (succeeded,
// canceled); anything else is read again.
func finalAsTold(ctx context.Context, db *pgxpool.Pool, ev operation.Event) (bool, error) {
	status := FinalStatusOfEvent(ev.Type)
	if status == "" {
		return false, nil
	}
	var agrees bool
	if err := db.QueryRow(ctx, `SELECT `+RecordsSQL("$1", "$2", "$3"), ev.ObjectID, ev.Account, status).Scan(&agrees); err != nil {
		return false, fmt.Errorf("read the payment of intent %s: %w", ev.ObjectID, err)
	}
	return agrees, nil
}
