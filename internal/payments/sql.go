package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/provider"
)

// ErrNotFound is returned for a payment that does not exist for the tenant.
var ErrNotFound = errors.New("payment not found")

const paymentColumns = operation.LifecycleColumns + `, amount, currency, payment_method, customer, description, metadata, status,
	provider_payment_intent_id, decline_code, provider_attempt_deadline, authorized_at, finalized_at, amount_refunded,
	provider_next_action, capture_method, amount_capturable, amount_captured`

// queueInsertPayment queues the insert of a new payment known in full,
// stamped by the caller, for a batch that does not read it back.
func queueInsertPayment(batch *pgx.Batch, p Payment) {
	batch.Queue(`
		INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, customer,
			description, metadata, status, provider_idempotency_key, provider_key_generation, created_at, updated_at,
			capture_method, oncepay_ref, provider_account)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
			(SELECT stripe_account FROM tenants WHERE id = $2))`,
		p.ID, p.TenantID, p.IdempotencyKey, p.Amount, p.Currency, p.PaymentMethod, p.Customer,
		p.Description, p.Metadata, p.Status, p.ProviderIdempotencyKey, p.ProviderKeyGeneration, p.CreatedAt, p.UpdatedAt,
		p.CaptureMethod, p.Ref)
}

// GetPayment reads a tenant's payment. Another tenant's payment is
// ErrNotFound, exactly like a missing one.
func GetPayment(ctx context.Context, db operation.Querier, tenantID, paymentID string) (Payment, error) {
	return rowsOf(nil).Load(ctx, db, tenantID, paymentID)
}

// lockPayment reads a tenant's payment and locks its row until tx ends.
// Every transaction that changes a payment's outcome takes this lock first
// and the idempotency key's second; one order everywhere means two of them
// can never deadlock.
func lockPayment(ctx context.Context, tx pgx.Tx, tenantID, paymentID string) (Payment, error) {
	rows, err := tx.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenantID, paymentID)
	return collectPayment(rows, err, "lock payment")
}

// LockForOperation locks a tenant's payment for an operation on it (a
// refund, a capture, a cancel): the first lock of the one order. It
// answers what the client must see when it cannot: 404 for a payment that
// is not the tenant's, 409 payment-busy when the payment stays locked past
// the key's lock wait (its lock_timeout is in force for the whole
// transaction).
func LockForOperation(ctx context.Context, tx pgx.Tx, tenantID, paymentID string) (Payment, error) {
	p, err := lockPayment(ctx, tx, tenantID, paymentID)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, ErrNotFound):
		return p, problem.New(problem.NotFound, "No payment %q.", paymentID)
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		return p, &problem.Error{Type: problem.PaymentBusy, RetryAfter: time.Second,
			Detail: fmt.Sprintf("Payment %s is being updated by another operation; nothing was done. Retry with the same Idempotency-Key.", paymentID)}
	}
	return p, err
}

// rowsOf is how the engine reads, locks and resumes payments. Every
// transaction that changes a payment's outcome takes its locks (Locked):
// the payment row, then its key (a reaped key is no obstacle); one order
// everywhere means two of them can never deadlock.
func rowsOf(keys *idempotency.Store) operation.Rows[Payment] {
	return operation.Rows[Payment]{Table: paymentsTable, Keys: keys}
}

func collectPayment(rows pgx.Rows, err error, what string) (Payment, error) {
	return postgres.CollectOne[Payment](rows, err, what, ErrNotFound)
}

// recordPending notes the provider's intent and whether it waits for its
// customer (requires_action, with what the customer must do), so the next
// run polls that intent instead of creating one.
func recordPending(ctx context.Context, db operation.Querier, p Payment, out provider.Outcome) error {
	status := StatusProcessing
	var next *NextAction
	if out.Intent.Status == stripe.PaymentIntentStatusRequiresAction {
		status = StatusRequiresAction
		next = nextActionOf(out.Intent)
	}
	return rowsOf(nil).NotePending(ctx, db, p, out.IntentID(), string(status), next)
}

// notePending records a pending provider answer in tx, which holds the
// payment's lock and then its key's (Rows.Locked). A payment now waiting
// for its customer also gets its key's stored 202 refreshed, so that the
// client's retry learns what the customer must do (next_action) without a
// second request.
func notePending(ctx context.Context, tx pgx.Tx, keys *idempotency.Store, p Payment, out provider.Outcome) error {
	if err := recordPending(ctx, tx, p, out); err != nil {
		return err
	}
	if out.Intent == nil || out.Intent.Status != stripe.PaymentIntentStatusRequiresAction {
		return nil
	}
	waiting, err := lockPayment(ctx, tx, p.TenantID, p.ID)
	if err != nil {
		return err
	}
	resp, err := acceptedResponse(waiting, time.Second)
	if err != nil {
		return err
	}
	if err := keys.Refresh(ctx, tx, p.TenantID, p.IdempotencyKey, resp); err != nil && !errors.Is(err, idempotency.ErrTransition) {
		return fmt.Errorf("refresh the stored answer: %w", err)
	}
	return nil
}

// finalizePayment moves a payment from one of the from states (none: any
// answering one) to a final state. changed is false when another run
// already moved it: the caller then records nothing else. The caller holds
// the payment's locks.
func finalizePayment(ctx context.Context, tx pgx.Tx, p Payment, from []Status, status Status, out provider.Outcome) (Payment, bool, error) {
	v := operation.Verdict{Status: string(status), ProviderID: out.IntentID()}
	if len(from) > 0 {
		v.From = texts(from)
	}
	var decline string
	if status == StatusFailed || status == StatusCanceled {
		v.FailureCode, decline, v.FailureMessage = out.Code, out.DeclineCode, out.Message
	}
	// An authorization holds the amount; a success took what the provider
	// received (all of it, for an automatic payment).
	var capturable, captured int64
	switch status {
	case StatusRequiresCapture:
		capturable = p.Amount
		if out.Intent != nil && out.Intent.AmountCapturable > 0 {
			capturable = out.Intent.AmountCapturable
		}
	case StatusSucceeded:
		captured = p.Amount
		if out.Intent != nil && out.Intent.AmountReceived > 0 {
			captured = out.Intent.AmountReceived
		}
	}
	v.Also = []any{decline, capturable, captured, out.Intent != nil && out.Intent.Status == stripe.PaymentIntentStatusCanceled}
	return rowsOf(nil).Finish(ctx, tx, p, v)
}

// finishColumns are what a payment's final status also writes
// (operation.Table.AlsoFinish), from its verdict's Also: the decline code,
// what an authorization holds and what a charge took.
const finishColumns = `, decline_code = nullif($9, ''), amount_capturable = $10, amount_captured = $11,
	-- A final payment needs no customer action: its client_secret goes.
	provider_next_action = NULL,
	authorized_at = CASE WHEN $4 = 'requires_capture' THEN now() ELSE authorized_at END,
	finalized_at = CASE WHEN $4 IN ('succeeded', 'failed', 'canceled') THEN now() END,
	-- A decline whose intent was closed first needs no pass of
	-- CloseDeclines to close it.
	intent_checked_at = CASE WHEN $4 = 'failed' AND $12 THEN now() END`

// texts converts a slice of string-typed values (statuses, job states) to
// the []string pgx encodes as a text array.
func texts[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// claimCustomer makes tenantID the owner of customer, if it is the first
// tenant to pay with it, and refuses a customer another tenant owns: a
// *problem.Error that rolls the key's transaction back, so nothing is
// stored or sent. Only tenants without a connected account share the
// platform's customers; a tenant with one claims nothing, as the provider
// finds no other account's customer there.
func claimCustomer(ctx context.Context, tx pgx.Tx, tenantID, customer string) error {
	var owner string
	// DO UPDATE, not DO NOTHING: it returns the owner that won a race.
	err := tx.QueryRow(ctx, `
		INSERT INTO customer_owners (customer, tenant_id)
		SELECT $1, id FROM tenants WHERE id = $2 AND stripe_account IS NULL
		ON CONFLICT (customer) DO UPDATE SET tenant_id = customer_owners.tenant_id
		RETURNING tenant_id`, customer, tenantID).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("claim customer: %w", err)
	case owner != tenantID:
		pe := problem.New(problem.CustomerForbidden, "Customer %s was first used by another tenant: it cannot be charged for this one.", customer)
		pe.Extensions = map[string]any{"field": "customer"}
		return pe
	}
	return nil
}

// EachAccount calls fn, in turn, with each account that may hold payments
// made since since, the platform's own ("") first, and pc made for it:
// what a ledger check and the event recovery list.
func EachAccount(ctx context.Context, db operation.Querier, since time.Time, pc *provider.Client, fn func(account string, pc *provider.Client) error) error {
	return paymentsTable.EachAccount(ctx, db, since, true, pc, fn)
}
