package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/tenant"
)

// Payment is a payment as operators see it (the JSON of "payments list"
// and of the commands that answer with a payment): with its tenant, its
// key and what we know of its provider calls, which tenants never see.
type Payment struct {
	ID             string            `json:"id"`
	TenantID       string            `json:"tenant_id"`
	IdempotencyKey string            `json:"idempotency_key"`
	Status         payments.Status   `json:"status"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	PaymentMethod  string            `json:"payment_method"`
	Metadata       map[string]string `json:"metadata"`
	FailureCode    *string           `json:"failure_code"`
	DeclineCode    *string           `json:"decline_code"`
	FailureMessage *string           `json:"failure_message"`
	Provider       ProviderCalls     `json:"provider"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
}

// ProviderCalls is what we know of a payment's calls to the provider.
type ProviderCalls struct {
	// Account is the connected account the calls act on; nil: the
	// platform's own.
	Account           *string    `json:"account"`
	IntentID          *string    `json:"intent_id"`
	IdempotencyKey    string     `json:"idempotency_key"`
	Generation        int        `json:"generation"`
	FirstAttemptAt    *time.Time `json:"first_attempt_at"`
	LastAttemptAt     *time.Time `json:"last_attempt_at"`
	ReconcileAfter    *time.Time `json:"reconcile_after"`
	ReconcileAttempts int        `json:"reconcile_attempts"`
}

// operatorView is p as operators see it.
func operatorView(p payments.Payment) Payment {
	return Payment{
		ID: p.ID, TenantID: p.TenantID, IdempotencyKey: p.IdempotencyKey, Status: p.Status, Amount: p.Amount, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, Metadata: p.Metadata, FailureCode: p.FailureCode, DeclineCode: p.DeclineCode,
		FailureMessage: p.FailureMessage, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		Provider: ProviderCalls{
			Account: p.ProviderAccount, IntentID: p.ProviderPaymentIntentID, IdempotencyKey: p.ProviderIdempotencyKey,
			Generation:     p.ProviderKeyGeneration,
			FirstAttemptAt: p.FirstProviderAttemptAt, LastAttemptAt: p.LastProviderAttemptAt,
			ReconcileAfter: p.ReconcileAfter, ReconcileAttempts: p.ReconcileAttempts,
		},
	}
}

// moneyFields are the lines of a payment's money that mean something for
// it: what an authorization holds or a capture took, what refunds gave
// back, and why it failed; a line that would say nothing is left out.
func moneyFields(p payments.Payment) []string {
	var fields []string
	if p.CaptureMethod == payments.CaptureManual && (p.AmountCapturable > 0 || p.AmountCaptured > 0) {
		fields = append(fields, "authorization", fmt.Sprintf("%d capturable, %d captured", p.AmountCapturable, p.AmountCaptured))
	}
	if p.AmountRefunded > 0 {
		fields = append(fields, "refunded", fmt.Sprintf("%d of %d captured", p.AmountRefunded, p.AmountCaptured))
	}
	if p.FailureCode != nil || p.FailureMessage != nil {
		failure := str(p.FailureCode)
		if p.DeclineCode != nil {
			failure += " (decline " + *p.DeclineCode + ")"
		}
		fields = append(fields, "failure", failure+": "+str(p.FailureMessage))
	}
	return fields
}

// keyAnswer says what the API answers a retry with the key in this state:
// the stored response only where the API replays it.
func keyAnswer(status idempotency.Status, stored *int) string {
	switch status {
	case idempotency.StatusUnknown:
		return "a retry is answered 409 idempotency-outcome-unknown while it is reconciled"
	case idempotency.StatusFailedRetryable:
		return "a retry runs the operation again (202)"
	case idempotency.StatusExpired:
		return "a retry is answered 422 idempotency-key-expired"
	}
	if stored == nil {
		return "a retry is answered 409 idempotency-key-in-use"
	}
	return fmt.Sprintf("a retry replays %d", *stored)
}

// reconcileState says where a payment stands with the reconciler.
func reconcileState(p payments.Payment) string {
	switch {
	case p.Status != payments.StatusRequiresReconciliation:
		return "-"
	case p.ReconcileAfter == nil:
		return fmt.Sprintf("left to an operator after %d looks", p.ReconcileAttempts)
	}
	return fmt.Sprintf("next look %s (%d looks so far)", ts(*p.ReconcileAfter), p.ReconcileAttempts)
}

func (c call) paymentsList(ctx context.Context) error {
	o := c.cmd.opts
	f := payments.ListFilter{Status: payments.Status(o.status), Since: o.since, Limit: o.limit}
	if o.tenant != "" {
		id, err := tenant.Lookup(ctx, c.Pool, o.tenant)
		if err != nil {
			return err
		}
		f.TenantID = id
	}
	list, err := payments.ListAll(ctx, c.Pool, f)
	if err != nil {
		return err
	}
	if o.json {
		views := make([]Payment, len(list))
		for i, p := range list {
			views[i] = operatorView(p)
		}
		return c.writeJSON(views)
	}
	var rows [][]string
	for _, p := range list {
		rows = append(rows, []string{p.ID, p.TenantID, string(p.Status), fmt.Sprintf("%d %s", p.Amount, p.Currency),
			str(p.FailureCode), ts(p.CreatedAt), reconcileState(p)})
	}
	return c.table("PAYMENT\tTENANT\tSTATUS\tAMOUNT\tFAILURE\tCREATED\tRECONCILIATION", rows)
}

// ShownKey is an idempotency key as operators see it: never its stored
// response body, which is the tenant's.
type ShownKey struct {
	Key            string             `json:"idempotency_key"`
	Status         idempotency.Status `json:"status"`
	ResourceID     string             `json:"resource_id"`
	ResponseStatus *int               `json:"response_status"`
	CreatedAt      time.Time          `json:"created_at"`
	UpdatedAt      time.Time          `json:"updated_at"`
	ExpiresAt      time.Time          `json:"expires_at"`
}

// showKey is a key's row as the operator's JSON shows it (nil for none:
// reaped): its answer's status, not its stored bytes.
func showKey(rec *idempotency.Record) *ShownKey {
	if rec == nil {
		return nil
	}
	k := &ShownKey{Key: rec.Key, Status: rec.Status, ResourceID: rec.ResourceID,
		CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.UpdatedAt.UTC(), ExpiresAt: rec.ExpiresAt.UTC()}
	if rec.Response != nil {
		k.ResponseStatus = &rec.Response.StatusCode
	}
	return k
}

// ShownPayment is everything "payments show --json" tells of a payment.
type ShownPayment struct {
	Payment Payment `json:"payment"`
	// Operations are the payment's provider operations in order: its
	// charge, then each refund.
	Operations []console.Operation   `json:"operations"`
	Key        *ShownKey             `json:"key"`
	Releases   []idempotency.Release `json:"key_releases"`
	Jobs       []operation.Job       `json:"jobs"`
	Events     []payments.Event      `json:"webhook_events"`
	Findings   []ledger.Finding      `json:"findings"`
}

func (c call) paymentsShow(ctx context.Context) error {
	d, err := payments.Show(ctx, c.Pool, c.keys(), c.cmd.args[0])
	if errors.Is(err, payments.ErrNotFound) {
		return fmt.Errorf("%w: no payment %q (\"api payments list\" lists them)", err, c.cmd.args[0])
	}
	if err != nil {
		return err
	}
	ops, err := console.OperationsOf(ctx, c.Pool, c.cmd.kinds, d.Payment)
	if err != nil {
		return err
	}
	if err := console.AddOperationJobs(ctx, c.Pool, &d, ops); err != nil {
		return err
	}
	shown := ShownPayment{Payment: operatorView(d.Payment), Operations: ops, Releases: d.Releases, Jobs: d.Jobs, Events: d.Events,
		Findings: d.Findings}
	shown.Key = showKey(d.Key)
	if c.cmd.opts.json {
		return c.writeJSON(shown)
	}
	p := d.Payment
	keyState := "reaped (no row)"
	if k := shown.Key; k != nil {
		keyState = string(k.Status) + ", " + keyAnswer(k.Status, k.ResponseStatus)
		keyState += ", expires " + ts(k.ExpiresAt)
	}
	if err := c.fields(append(append([]string{
		"payment", p.ID, "tenant", p.TenantID, "status", string(p.Status),
		"amount", fmt.Sprintf("%d %s (%s, capture %s)", p.Amount, p.Currency, p.PaymentMethod, p.CaptureMethod)},
		moneyFields(p)...),
		"created / updated", ts(p.CreatedAt)+" / "+ts(p.UpdatedAt),
		"idempotency key", p.IdempotencyKey, "key state", keyState,
		"provider account", console.AccountName(p.ProviderAccount),
		"provider intent", str(p.ProviderPaymentIntentID), "provider key", p.ProviderIdempotencyKey,
		"generation", fmt.Sprint(p.ProviderKeyGeneration),
		"provider attempts", "first "+tsp(p.FirstProviderAttemptAt)+", last "+tsp(p.LastProviderAttemptAt),
		"reconciliation", reconcileState(p),
	)...); err != nil {
		return err
	}
	for _, r := range d.Releases {
		fmt.Fprintf(c.Stdout, "key released %s by %s: %s\n", ts(r.ReleasedAt), r.Operator, r.Reason)
	}
	var rows [][]string
	for _, op := range shown.Operations {
		rows = append(rows, []string{op.Operation, op.ID, op.Status, fmt.Sprint(op.Amount), op.IdempotencyKey, str(op.ProviderObjectID),
			fmt.Sprint(op.Generation), ts(op.CreatedAt)})
	}
	fmt.Fprintln(c.Stdout, "\noperations:")
	if err := c.table("OPERATION\tID\tSTATUS\tAMOUNT\tKEY\tPROVIDER OBJECT\tGENERATION\tCREATED", rows); err != nil {
		return err
	}
	rows = nil
	for _, j := range d.Jobs {
		last := "-"
		if n := len(j.Errors); n > 0 {
			last = fmt.Sprintf("attempt %d: %s", j.Errors[n-1].Attempt, j.Errors[n-1].Error)
		}
		rows = append(rows, []string{fmt.Sprint(j.ID), j.Kind, j.State, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
			ts(j.CreatedAt), tsp(j.FinalizedAt), fmt.Sprint(len(j.Errors)), last})
	}
	fmt.Fprintln(c.Stdout, "\njobs:")
	if err := c.table("JOB\tKIND\tSTATE\tATTEMPT\tCREATED\tFINALIZED\tERRORS\tLAST ERROR", rows); err != nil {
		return err
	}
	if len(d.Events) > 0 {
		rows = nil
		for _, e := range d.Events {
			rows = append(rows, []string{e.ID, e.Type, str(e.ObjectID), e.Source, ts(e.Created), tsp(e.ProcessedAt), str(e.Result)})
		}
		fmt.Fprintln(c.Stdout, "\nwebhook events:")
		if err := c.table("EVENT\tTYPE\tOBJECT\tSOURCE\tCREATED\tPROCESSED\tRESULT", rows); err != nil {
			return err
		}
	}
	if len(d.Findings) > 0 {
		fmt.Fprintln(c.Stdout, "\nledger findings:")
		return c.findingsTable(d.Findings)
	}
	return nil
}
