package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/envconfig"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/serve"
	"github.com/oncepay/oncepay/internal/tenant"
)

// admin runs the operator commands against one database.
type admin struct {
	cfg    databaseConfig
	pool   *pgxpool.Pool
	getenv func(string) string
	out    io.Writer
	cmd    command
}

// runAdmin runs an operator command: a table by default, JSON with --json.
func runAdmin(ctx context.Context, a admin) error {
	var err error
	switch a.cmd.name {
	case "tenants list":
		err = a.tenantsList(ctx)
	case "tenants set-account":
		err = a.tenantsSetAccount(ctx)
	case "tenants rotate-key":
		err = a.tenantsRotateKey(ctx)
	case "tenants revoke-key":
		err = a.tenantsRevokeKey(ctx)
	case "payments list":
		err = a.paymentsList(ctx)
	case "payments show":
		err = a.paymentsShow(ctx)
	case "operations list":
		err = a.operationsList(ctx)
	case "operations show":
		err = a.operationsShow(ctx)
	case "reconcile":
		err = a.reconcile(ctx)
	case "keys release":
		err = a.keysRelease(ctx)
	case "ledger check":
		err = a.ledgerCheck(ctx)
	case "findings list":
		err = a.findingsList(ctx)
	case "findings resolve":
		err = a.findingsResolve(ctx)
	default:
		return fmt.Errorf("command %q has no implementation", a.cmd.name)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", a.cmd.name, err)
	}
	return nil
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

// keys is a key store with the configured retention, so a released key's
// retention counts as the API's does.
func (a admin) keys() *idempotency.Store {
	return idempotency.NewStore(idempotency.Config{Retention: a.cfg.IdempotencyRetention, TombstoneRetention: a.cfg.IdempotencyTombstoneRetention})
}

// providerConfig is what the commands that call the provider read, with
// the worker's names and defaults.
type providerConfig struct {
	SecretKey       string
	APIBase         string
	ReconcileSettle time.Duration
}

func loadProviderConfig(getenv func(string) string) (providerConfig, error) {
	env := envconfig.New(getenv)
	cfg := providerConfig{
		SecretKey:       env.Required("STRIPE_SECRET_KEY", "the worker's Stripe secret key (sk_test_… for test mode or the simulator)"),
		APIBase:         env.URL("STRIPE_API_BASE"),
		ReconcileSettle: env.Duration("RECONCILE_SETTLE", time.Minute, 0, time.Hour),
	}
	return cfg, env.Err()
}

func (a admin) provider() (*provider.Client, providerConfig, error) {
	cfg, err := loadProviderConfig(a.getenv)
	if err != nil {
		return nil, cfg, fmt.Errorf("configuration: %w (set it as the worker has it; against a stack of make up, paste the "+
			"\"export DATABASE_URL=… STRIPE_API_BASE=… STRIPE_SECRET_KEY=…\" line it printed)", err)
	}
	return provider.New(provider.Config{SecretKey: cfg.SecretKey, APIBase: cfg.APIBase}), cfg, nil
}

func (a admin) writeJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned.
func (a admin) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// fields writes name/value pairs, aligned.
func (a admin) fields(pairs ...string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s:\t%s\n", pairs[i], pairs[i+1])
	}
	return tw.Flush()
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

func str(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func (a admin) tenantsList(ctx context.Context) error {
	list, err := tenant.List(ctx, a.pool)
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(list)
	}
	var rows [][]string
	for _, t := range list {
		account := "-"
		if t.StripeAccount != nil {
			account = *t.StripeAccount
		}
		if len(t.Keys) == 0 {
			rows = append(rows, []string{t.ID, t.Name, account, ts(t.CreatedAt), "-", "-", "no keys"})
		}
		for _, k := range t.Keys {
			state := "active"
			switch {
			case k.RevokedAt != nil:
				state = "revoked " + tsp(k.RevokedAt)
			case !k.Active:
				state = "expired " + tsp(k.ExpiresAt)
			case k.ExpiresAt != nil:
				state = "active until " + tsp(k.ExpiresAt)
			}
			rows = append(rows, []string{t.ID, t.Name, account, ts(t.CreatedAt), k.ID, ts(k.CreatedAt), state})
		}
	}
	return a.table("TENANT\tNAME\tSTRIPE ACCOUNT\tCREATED\tKEY\tISSUED\tSTATE", rows)
}

func (a admin) tenantsSetAccount(ctx context.Context) error {
	account := a.cmd.args[1]
	if account == "none" {
		account = ""
	}
	set, err := tenant.SetStripeAccount(ctx, a.pool, a.cmd.args[0], account,
		tenant.Reassign{Uses: kinds.All().AccountUses, Force: a.cmd.opts.force})
	var inUse *tenant.AccountInUseError
	if errors.As(err, &inUse) {
		return fmt.Errorf("%w (--force with --operator and --reason gives it even so: they keep acting on it)", err)
	}
	if err != nil {
		return err
	}
	forced := len(set.Overridden) > 0
	if a.cmd.opts.json {
		out := map[string]any{"tenant_id": set.TenantID, "stripe_account": nil}
		if account != "" {
			out["stripe_account"] = account
		}
		if forced {
			out["overridden"], out["operator"], out["reason"] = set.Overridden, a.cmd.opts.operator, a.cmd.opts.reason
		}
		return a.writeJSON(out)
	}
	fields := []string{"tenant", set.TenantID, "stripe account", cmp.Or(account, "none (the platform's own)")}
	if forced {
		fields = append(fields, "given by force", fmt.Sprintf("by %s: %s", a.cmd.opts.operator, a.cmd.opts.reason),
			"still acting on it", tenant.DescribeUses(set.Overridden))
	}
	return a.fields(fields...)
}

func (a admin) tenantsRotateKey(ctx context.Context) error {
	rotated, err := tenant.RotateKey(ctx, a.pool, a.cmd.args[0], a.cmd.opts.grace)
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(rotated)
	}
	if err := a.fields("tenant", rotated.TenantID, "new api key", rotated.APIKey+"  (shown only this once)"); err != nil {
		return err
	}
	if len(rotated.Expiring) == 0 {
		return nil
	}
	var rows [][]string
	for _, k := range rotated.Expiring {
		rows = append(rows, []string{k.ID, ts(k.CreatedAt), tsp(k.ExpiresAt)})
	}
	fmt.Fprintln(a.out, "\nkeys valid before the rotation:")
	return a.table("KEY\tISSUED\tVALID UNTIL", rows)
}

func (a admin) tenantsRevokeKey(ctx context.Context) error {
	key, err := tenant.RevokeKey(ctx, a.pool, a.cmd.args[0], a.cmd.args[1])
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(key)
	}
	return a.fields("key", key.ID, "revoked", tsp(key.RevokedAt))
}

// operatorPayment is a payment as operators see it: with its tenant, its
// key and what we know of its provider calls, which tenants never see.
type operatorPayment struct {
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
	Provider       providerCalls     `json:"provider"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
}

type providerCalls struct {
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

func operatorView(p payments.Payment) operatorPayment {
	return operatorPayment{
		ID: p.ID, TenantID: p.TenantID, IdempotencyKey: p.IdempotencyKey, Status: p.Status, Amount: p.Amount, Currency: p.Currency,
		PaymentMethod: p.PaymentMethod, Metadata: p.Metadata, FailureCode: p.FailureCode, DeclineCode: p.DeclineCode,
		FailureMessage: p.FailureMessage, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		Provider: providerCalls{
			Account: p.ProviderAccount, IntentID: p.ProviderPaymentIntentID, IdempotencyKey: p.ProviderIdempotencyKey,
			Generation:     p.ProviderKeyGeneration,
			FirstAttemptAt: p.FirstProviderAttemptAt, LastAttemptAt: p.LastProviderAttemptAt,
			ReconcileAfter: p.ReconcileAfter, ReconcileAttempts: p.ReconcileAttempts,
		},
	}
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

func (a admin) paymentsList(ctx context.Context) error {
	o := a.cmd.opts
	f := payments.ListFilter{Status: payments.Status(o.status), Since: o.since, Limit: o.limit}
	if o.tenant != "" {
		id, err := tenant.Lookup(ctx, a.pool, o.tenant)
		if err != nil {
			return err
		}
		f.TenantID = id
	}
	list, err := payments.ListAll(ctx, a.pool, f)
	if err != nil {
		return err
	}
	if o.json {
		views := make([]operatorPayment, len(list))
		for i, p := range list {
			views[i] = operatorView(p)
		}
		return a.writeJSON(views)
	}
	var rows [][]string
	for _, p := range list {
		rows = append(rows, []string{p.ID, p.TenantID, string(p.Status), fmt.Sprintf("%d %s", p.Amount, p.Currency),
			str(p.FailureCode), ts(p.CreatedAt), reconcileState(p)})
	}
	return a.table("PAYMENT\tTENANT\tSTATUS\tAMOUNT\tFAILURE\tCREATED\tRECONCILIATION", rows)
}

// shownKey is an idempotency key as operators see it: never its stored
// response body, which is the tenant's.
type shownKey struct {
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
func showKey(rec *idempotency.Record) *shownKey {
	if rec == nil {
		return nil
	}
	k := &shownKey{Key: rec.Key, Status: rec.Status, ResourceID: rec.ResourceID,
		CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.UpdatedAt.UTC(), ExpiresAt: rec.ExpiresAt.UTC()}
	if rec.Response != nil {
		k.ResponseStatus = &rec.Response.StatusCode
	}
	return k
}

type shownPayment struct {
	Payment operatorPayment `json:"payment"`
	// Operations are the payment's provider operations in order: its
	// charge, then each refund.
	Operations []console.Operation   `json:"operations"`
	Key        *shownKey             `json:"key"`
	Releases   []idempotency.Release `json:"key_releases"`
	Jobs       []payments.Job        `json:"jobs"`
	Events     []payments.Event      `json:"webhook_events"`
	Findings   []ledger.Finding      `json:"findings"`
}

func (a admin) paymentsShow(ctx context.Context) error {
	d, err := payments.Show(ctx, a.pool, a.keys(), a.cmd.args[0])
	if errors.Is(err, payments.ErrNotFound) {
		return fmt.Errorf("%w: no payment %q (\"api payments list\" lists them)", err, a.cmd.args[0])
	}
	if err != nil {
		return err
	}
	ops, err := console.OperationsOf(ctx, a.pool, d.Payment)
	if err != nil {
		return err
	}
	if err := console.AddOperationJobs(ctx, a.pool, &d, ops); err != nil {
		return err
	}
	shown := shownPayment{Payment: operatorView(d.Payment), Operations: ops, Releases: d.Releases, Jobs: d.Jobs, Events: d.Events,
		Findings: d.Findings}
	shown.Key = showKey(d.Key)
	if a.cmd.opts.json {
		return a.writeJSON(shown)
	}
	p := d.Payment
	keyState := "reaped (no row)"
	if k := shown.Key; k != nil {
		keyState = string(k.Status) + ", " + keyAnswer(k.Status, k.ResponseStatus)
		keyState += ", expires " + ts(k.ExpiresAt)
	}
	if err := a.fields(append(append([]string{
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
		fmt.Fprintf(a.out, "key released %s by %s: %s\n", ts(r.ReleasedAt), r.Operator, r.Reason)
	}
	var rows [][]string
	for _, op := range shown.Operations {
		rows = append(rows, []string{op.Operation, op.ID, op.Status, fmt.Sprint(op.Amount), op.IdempotencyKey, str(op.ProviderObjectID),
			fmt.Sprint(op.Generation), ts(op.CreatedAt)})
	}
	fmt.Fprintln(a.out, "\noperations:")
	if err := a.table("OPERATION\tID\tSTATUS\tAMOUNT\tKEY\tPROVIDER OBJECT\tGENERATION\tCREATED", rows); err != nil {
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
	fmt.Fprintln(a.out, "\njobs:")
	if err := a.table("JOB\tKIND\tSTATE\tATTEMPT\tCREATED\tFINALIZED\tERRORS\tLAST ERROR", rows); err != nil {
		return err
	}
	if len(d.Events) > 0 {
		rows = nil
		for _, e := range d.Events {
			rows = append(rows, []string{e.ID, e.Type, str(e.ObjectID), e.Source, ts(e.Created), tsp(e.ProcessedAt), str(e.Result)})
		}
		fmt.Fprintln(a.out, "\nwebhook events:")
		if err := a.table("EVENT\tTYPE\tOBJECT\tSOURCE\tCREATED\tPROCESSED\tRESULT", rows); err != nil {
			return err
		}
	}
	if len(d.Findings) > 0 {
		fmt.Fprintln(a.out, "\nledger findings:")
		return a.findingsTable(d.Findings)
	}
	return nil
}

// reconcileSetup is what a reconciler run from the command line needs:
// the provider, and the settle time. "Never sent" is proven only once no
// request can still be in flight, by the deadline each attempt's worker
// stamped on the row, not by a timeout read from this shell.
func (a admin) reconcileSetup() (*provider.Client, payments.ReconcileConfig, error) {
	pc, pcfg, err := a.provider()
	return pc, payments.ReconcileConfig{Settle: pcfg.ReconcileSettle}, err
}

// reconciler is the worker's payments reconciler.
func (a admin) reconciler(logger *slog.Logger) (*payments.Reconciler, error) {
	pc, cfg, err := a.reconcileSetup()
	if err != nil {
		return nil, err
	}
	return payments.NewReconciler(a.pool, a.keys(), pc, logger, cfg), nil
}

// kindOf is the kind (other than payments, whose commands are their own)
// an id belongs to, from the registry.
func kindOf(id string) operation.Kind {
	if kind, ok := kinds.All().Of(id); ok && kind.Name() != "payment" {
		return kind
	}
	return nil
}

// operator is the kind's operator's reach, with the worker's reconciler.
func (a admin) operator(kind operation.Kind, logger *slog.Logger) (operation.Operator, error) {
	pc, cfg, err := a.reconcileSetup()
	if err != nil {
		return nil, err
	}
	return kind.Operator(operation.Env{Pool: a.pool, Keys: a.keys(), Provider: pc, Logger: logger, Reconcile: cfg}), nil
}

// awaitingReconciliation is every kind's status while only a look-up at
// the provider can settle it.
const awaitingReconciliation = "requires_reconciliation"

// reconcileOne reconciles one operation of kind awaiting reconciliation
// now, as its reconciler's next run would; any other is left unchanged,
// with the verdict a payment that needs nothing gets.
func (a admin) reconcileOne(ctx context.Context, kind operation.Kind, id string, logger *slog.Logger) error {
	r, err := a.operator(kind, logger)
	if err != nil {
		return err
	}
	before, err := r.Find(ctx, id)
	if errors.Is(err, kind.Table().NotFound) {
		return fmt.Errorf("%w (\"api operations list %s\" lists them)", err, kind.Name())
	}
	if err != nil {
		return err
	}
	tenantID := before.TenantID
	if before.Status != awaitingReconciliation {
		// Nothing to settle: the same verdict a final payment gets.
		note := fmt.Sprintf("only an operation awaiting reconciliation is looked up at the provider; this one is %s", before.Status)
		if a.cmd.opts.json {
			return a.writeJSON(map[string]any{"verdict": "unchanged", "note": note, "before": before.View, "after": before.View})
		}
		return a.fields(kind.Name(), before.ID, "verdict", "unchanged", "status", before.Status, "note", note, "payment", before.ParentID)
	}
	counts, err := r.ReconcileNow(ctx, tenantID, id)
	if err != nil {
		return err
	}
	after, err := r.Show(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(map[string]any{"verdict": counts.Verdict(), "before": before.View, "after": after.View})
	}
	return a.fields(kind.Name(), after.ID, "verdict", counts.Verdict(), "status", fmt.Sprintf("%s -> %s", before.Status, after.Status),
		"failure", fmt.Sprintf("%s: %s", after.FailureCode, after.FailureMessage), "payment", after.ParentID)
}

// releaseOne releases the key, stuck unknown, of an operation of kind, as
// keysRelease does a payment's: only on the provider's proof that the
// operation was never made.
func (a admin) releaseOne(ctx context.Context, kind operation.Kind, tenantID, key string) error {
	r, err := a.operator(kind, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	res, err := r.ReleaseKey(ctx, tenantID, key, a.cmd.opts.reason, a.cmd.opts.operator)
	if err != nil {
		return err
	}
	op, err := r.Show(ctx, tenantID, res.ID)
	if err != nil {
		return err
	}
	keyStatus := idempotency.StatusFailedRetryable
	if res.Verdict == "settled" {
		keyStatus = idempotency.StatusCompleted
	}
	if a.cmd.opts.json {
		out := map[string]any{"verdict": res.Verdict, kind.Name(): op.View, "key_status": keyStatus}
		if res.Verdict == "released" {
			out["release"] = res.Release
		}
		return a.writeJSON(out)
	}
	return a.fields("verdict", res.Verdict, kind.Name(), fmt.Sprintf("%s of payment %s is %s (%s)", op.ID, op.ParentID, op.Status, op.FailureCode),
		"key", fmt.Sprintf("%s is %s", key, keyStatus))
}

func (a admin) reconcile(ctx context.Context) error {
	// The reconciler's notes ("a charge request may still be in flight")
	// are shown with the answer.
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, at slog.Attr) slog.Attr {
			if at.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return at
		},
	}))
	if kind := kindOf(a.cmd.args[0]); kind != nil {
		if err := a.reconcileOne(ctx, kind, a.cmd.args[0], logger); err != nil {
			return err
		}
		if logs.Len() > 0 && !a.cmd.opts.json {
			fmt.Fprintf(a.out, "\nreconciler log:\n%s", logs.String())
		}
		return nil
	}
	r, err := a.reconciler(logger)
	if err != nil {
		return err
	}
	res, err := r.ReconcilePayment(ctx, a.cmd.args[0])
	if errors.Is(err, payments.ErrNotFound) {
		return fmt.Errorf("%w: no payment %q (\"api payments list\" lists them)", err, a.cmd.args[0])
	}
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(map[string]any{"verdict": res.Verdict, "finding": res.Finding,
			"before": operatorView(res.Before), "after": operatorView(res.After)})
	}
	p := res.After
	if err := a.fields("payment", p.ID, "verdict", res.Verdict,
		"status", fmt.Sprintf("%s -> %s", res.Before.Status, p.Status),
		"failure", fmt.Sprintf("%s: %s", str(p.FailureCode), str(p.FailureMessage)),
		"provider intent", str(p.ProviderPaymentIntentID), "reconciliation", reconcileState(p)); err != nil {
		return err
	}
	if res.Finding != "" {
		fmt.Fprintf(a.out, "finding recorded: %s\n", res.Finding)
	}
	if logs.Len() > 0 {
		fmt.Fprintf(a.out, "\nreconciler log:\n%s", logs.String())
	}
	return nil
}

func (a admin) keysRelease(ctx context.Context) error {
	tenantID, err := tenant.Lookup(ctx, a.pool, a.cmd.args[0])
	if err != nil {
		return err
	}
	key := a.cmd.args[1]
	rec, err := a.keys().Get(ctx, a.pool, tenantID, key)
	if errors.Is(err, idempotency.ErrKeyNotFound) {
		return fmt.Errorf("%w (\"api payments show ID\" names a payment's key)", err)
	}
	if err != nil {
		return err
	}
	if kind := kindOf(rec.ResourceID); kind != nil {
		return a.releaseOne(ctx, kind, tenantID, key)
	}
	r, err := a.reconciler(slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	res, err := r.ReleaseKey(ctx, tenantID, key, a.cmd.opts.reason, a.cmd.opts.operator)
	if err != nil {
		return err
	}
	p, rel := res.Payment, res.Release
	if a.cmd.opts.json {
		out := map[string]any{"verdict": res.Verdict, "payment": operatorView(p)}
		if res.Verdict == "released" {
			out["release"], out["key_status"] = rel, idempotency.StatusFailedRetryable
		} else {
			out["key_status"] = idempotency.StatusCompleted
		}
		return a.writeJSON(out)
	}
	if res.Verdict == "settled" {
		return a.fields("verdict", "settled, not released: the provider has this payment's charge",
			"payment", fmt.Sprintf("%s is %s (intent %s)", p.ID, p.Status, str(p.ProviderPaymentIntentID)),
			"key", fmt.Sprintf("%s is %s: the client's retry with it replays the payment", p.IdempotencyKey, idempotency.StatusCompleted))
	}
	return a.fields("verdict", "released: the provider has no charge for this payment", "released", rel.ID,
		"payment", fmt.Sprintf("%s is %s (%s)", p.ID, p.Status, str(p.FailureCode)),
		"key", fmt.Sprintf("%s is %s: the client's retry with it charges the payment under generation %d", rel.Key,
			idempotency.StatusFailedRetryable, p.ProviderKeyGeneration+1),
		"by", rel.Operator, "reason", rel.Reason)
}

func (a admin) ledgerCheck(ctx context.Context) error {
	pc, _, err := a.provider()
	if err != nil {
		return err
	}
	env := operation.Env{Pool: a.pool, Provider: pc, Logger: slog.New(slog.DiscardHandler)}
	var results []operation.LedgerCheckResult
	var all []ledger.Disagreement
	for _, kind := range kinds.All() {
		if pass := kind.Ledger(env); pass != nil {
			res, err := pass.Check(ctx, a.cmd.opts.since, a.cmd.opts.until)
			if err != nil {
				return err
			}
			results, all = append(results, res), append(all, res.Disagreements...)
		}
	}
	if err := a.ledgerCheckReport(results, all); err != nil {
		return err
	}
	if len(all) > 0 {
		return &serve.ExitError{Code: exitFindings, Err: fmt.Errorf("%d disagreements with the provider", len(all))}
	}
	return nil
}

// ledgerCheckReport prints each kind's check: in JSON, what it listed and
// looked for under their names ("provider_refunds", "refunds").
func (a admin) ledgerCheckReport(results []operation.LedgerCheckResult, all []ledger.Disagreement) error {
	if a.cmd.opts.json {
		out := map[string]any{"from": a.cmd.opts.since.UTC(), "to": a.cmd.opts.until.UTC(), "disagreements": all}
		unchecked := 0
		for _, r := range results {
			out[strings.ReplaceAll(r.Objects, " ", "_")], out[r.Operations] = r.Listed, r.Succeeded
			unchecked += r.Unchecked
		}
		out["unchecked"] = unchecked
		return a.writeJSON(out)
	}
	fmt.Fprintf(a.out, "window %s to %s:", ts(a.cmd.opts.since), ts(a.cmd.opts.until))
	for _, r := range results {
		fmt.Fprintf(a.out, "\n%d %s listed, %d %s %s looked for, %d disagreements", r.Listed, r.Objects, r.Succeeded, r.Made, r.Operations,
			len(r.Disagreements))
		if r.Unchecked > 0 {
			fmt.Fprintf(a.out, ", %d %s not checked (provider errors: run again)", r.Unchecked, r.Operations)
		}
	}
	fmt.Fprintln(a.out)
	if len(all) == 0 {
		return nil
	}
	var rows [][]string
	for _, d := range all {
		finding := "already open"
		if d.New {
			finding = "new"
		}
		rows = append(rows, []string{d.Kind, orDash(d.PaymentID), orDash(d.RefundID + d.OperationID), orDash(d.IntentID + d.ProviderRefundID + d.ProviderObjectID),
			finding, d.Reason})
	}
	fmt.Fprintln(a.out)
	if err := a.table("KIND\tPAYMENT\tOPERATION\tPROVIDER OBJECT\tFINDING\tREASON", rows); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.out, "\n\"api findings list --open\" lists the findings; \"api payments show ID\" tells more of a payment.")
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a admin) findingsList(ctx context.Context) error {
	list, err := ledger.List(ctx, a.pool, ledger.Filter{OpenOnly: a.cmd.opts.open, Limit: a.cmd.opts.limit})
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		if list == nil {
			list = []ledger.Finding{}
		}
		return a.writeJSON(list)
	}
	return a.findingsTable(list)
}

func (a admin) findingsTable(list []ledger.Finding) error {
	var rows [][]string
	for _, f := range list {
		var ev struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(f.Evidence, &ev)
		state := "open"
		if f.ResolvedAt != nil {
			state = fmt.Sprintf("resolved %s by %s: %s", tsp(f.ResolvedAt), str(f.ResolvedBy), str(f.ResolutionNote))
		}
		rows = append(rows, []string{f.ID, f.Kind, str(f.PaymentID), str(f.RefundID), str(f.ProviderObjectID), ts(f.CreatedAt), orDash(ev.Reason), state})
	}
	return a.table("FINDING\tKIND\tPAYMENT\tREFUND\tPROVIDER OBJECT\tCREATED\tREASON\tSTATE", rows)
}

func (a admin) findingsResolve(ctx context.Context) error {
	f, err := ledger.Resolve(ctx, a.pool, a.cmd.args[0], a.cmd.opts.note, a.cmd.opts.operator)
	if errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("%w (\"api findings list --open\" lists the open ones)", err)
	}
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(f)
	}
	return a.fields("finding", f.ID, "resolved", tsp(f.ResolvedAt), "by", str(f.ResolvedBy), "note", str(f.ResolutionNote))
}

// operationsList lists one kind's operations, from the registry.
func (a admin) operationsList(ctx context.Context) error {
	var kind operation.Kind
	for _, k := range kinds.All() {
		if k.Name() == a.cmd.args[0] {
			kind = k
		}
	}
	if kind == nil {
		return serve.Usage(fmt.Errorf("no kind %q; the kinds are %s", a.cmd.args[0], strings.Join(kinds.All().Names(), ", ")))
	}
	if s := a.cmd.opts.status; s != "" && !slices.Contains(kind.Statuses(), s) {
		return serve.Usage(fmt.Errorf("--status %q is not a %s state; the states are %s", s, kind.Name(), strings.Join(kind.Statuses(), ", ")))
	}
	list, err := kind.Operator(operation.Env{Pool: a.pool, Keys: a.keys(), Logger: slog.New(slog.DiscardHandler)}).
		List(ctx, a.cmd.opts.status, a.cmd.opts.limit)
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		views := make([]any, len(list))
		for i, op := range list {
			views[i] = op.View
		}
		return a.writeJSON(views)
	}
	rows := make([][]string, len(list))
	for i, op := range list {
		rows[i] = []string{op.ID, op.Status, orDash(op.ParentID), op.TenantID, op.IdempotencyKey, orDash(op.FailureCode)}
	}
	return a.table("ID\tSTATUS\tPAYMENT\tTENANT\tKEY\tFAILURE", rows)
}

// operationsShow shows one operation of any kind, with its key and jobs.
func (a admin) operationsShow(ctx context.Context) error {
	id := a.cmd.args[0]
	kind, ok := kinds.All().Of(id)
	if !ok {
		return fmt.Errorf("%q is no operation's id: ids start with a kind's prefix: %s", id, kinds.All().Described())
	}
	op, err := kind.Operator(operation.Env{Pool: a.pool, Keys: a.keys(), Logger: slog.New(slog.DiscardHandler)}).Find(ctx, id)
	if errors.Is(err, kind.Table().NotFound) {
		return fmt.Errorf("%w (\"api operations list %s\" lists them)", err, kind.Name())
	}
	if err != nil {
		return err
	}
	tenantID := op.TenantID
	var key *idempotency.Record
	switch rec, err := a.keys().Get(ctx, a.pool, tenantID, op.IdempotencyKey); {
	case err == nil:
		key = &rec
	case !errors.Is(err, idempotency.ErrKeyNotFound):
		return err
	}
	jobs, err := operation.JobsOf(ctx, a.pool, op.AllJobs()...)
	if err != nil {
		return err
	}
	if a.cmd.opts.json {
		return a.writeJSON(map[string]any{"kind": kind.Name(), kind.Name(): op.View, "key": showKey(key), "jobs": jobs})
	}
	keyState := "reaped"
	if key != nil {
		keyState = string(key.Status)
	}
	account := op.Account
	if account == "" {
		account = "the platform's"
	}
	if err := a.fields(kind.Name(), op.ID, "status", op.Status, "amount", strconv.FormatInt(op.Amount, 10),
		"payment", orDash(op.ParentID), "tenant", op.TenantID, "account", account,
		"provider object", orDash(operation.Deref(op.ProviderID)), "generation", strconv.Itoa(op.Generation),
		"key", fmt.Sprintf("%s is %s", op.IdempotencyKey, keyState), "failure", orDash(op.FailureCode),
		"created", ts(op.CreatedAt), "updated", ts(op.UpdatedAt)); err != nil {
		return err
	}
	for _, j := range jobs {
		fmt.Fprintf(a.out, "job %d (%s): %s, attempt %d of %d\n", j.ID, j.Kind, j.State, j.Attempt, j.MaxAttempts)
	}
	return nil
}
