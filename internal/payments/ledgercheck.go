package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// LedgerCheckConfig tunes the LedgerChecker. Zero values take the defaults.
type LedgerCheckConfig struct {
	// Window is how far back the periodic check looks. Defaults to 26h:
	// a day, plus margin for a run that was late.
	Window time.Duration
	// ClockSkew widens the provider's listing on both sides, so an intent
	// of a payment inside the window is listed whatever the clocks say.
	// Defaults to 5m.
	ClockSkew time.Duration
	// UnsettledAfter is how long after its creation a succeeded intent
	// whose payment is still not final counts as beyond the reconciler's
	// reach (a reconciler that reads it settles it on its next look, at
	// most RECONCILE_BACKOFF_MAX later). Defaults to 2h.
	UnsettledAfter time.Duration
	// CallTimeout bounds one provider read. Defaults to 20s.
	CallTimeout time.Duration
	// MaxPages bounds the listing (100 intents a page). Defaults to 500.
	MaxPages int
}

// WithDefaults returns the configuration with zero values defaulted.
func (c LedgerCheckConfig) WithDefaults() LedgerCheckConfig {
	c.Window = cmp.Or(c.Window, 26*time.Hour)
	c.ClockSkew = cmp.Or(c.ClockSkew, 5*time.Minute)
	c.UnsettledAfter = cmp.Or(c.UnsettledAfter, 2*time.Hour)
	c.CallTimeout = cmp.Or(c.CallTimeout, 20*time.Second)
	c.MaxPages = cmp.Or(c.MaxPages, 500)
	return c
}

// LedgerChecker compares the provider's intents with our payments and
// records every disagreement as a ledger finding, for an operator. It only
// reads at the provider (lists intents, reads one by id): it never
// charges, refunds or cancels, and never changes a payment.
type LedgerChecker struct {
	pool     *pgxpool.Pool
	provider *provider.Client
	logger   *slog.Logger
	cfg      LedgerCheckConfig
}

// NewLedgerChecker returns a LedgerChecker.
func NewLedgerChecker(pool *pgxpool.Pool, pc *provider.Client, logger *slog.Logger, cfg LedgerCheckConfig) *LedgerChecker {
	return &LedgerChecker{pool: pool, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// Config returns the checker's configuration, defaults applied.
func (c *LedgerChecker) Config() LedgerCheckConfig { return c.cfg }

// Disagreement is one mismatch a check found.
type Disagreement = ledger.Disagreement

// NewFindings counts the disagreements that were not already open findings.
func NewFindings(ds []Disagreement) int {
	n := 0
	for _, d := range ds {
		if d.New {
			n++
		}
	}
	return n
}

// LedgerCheckResult is what one check saw and found.
type LedgerCheckResult struct {
	From, To time.Time
	// Intents is how many intents the provider listed; Payments how many
	// succeeded payments of the window were looked for at the provider.
	Intents, Payments int
	// Unchecked counts payments whose intent could not be read (a provider
	// error): the next check looks again.
	Unchecked     int
	Disagreements []Disagreement
}

// Check compares the intents created in [from, to] (widened by the clock
// skew) with our payments, and the payments that succeeded with a first
// provider attempt in [from, to] with the provider's intents.
//
// The platform's account is listed, and every connected account of a
// tenant or of a payment of the window: each has intents of its own.
func (c *LedgerChecker) Check(ctx context.Context, from, to time.Time) (LedgerCheckResult, error) {
	res := LedgerCheckResult{From: from, To: to}
	listed := map[string]*provider.Intent{}
	window := provider.ListWindow{CreatedFrom: from.Add(-c.cfg.ClockSkew), CreatedTo: to.Add(c.cfg.ClockSkew), MaxPages: c.cfg.MaxPages}
	err := EachAccount(ctx, c.pool, window.CreatedFrom, c.provider, func(account string, pc *provider.Client) error {
		return pc.ListIntents(ctx, window, func(page []*provider.Intent) error {
			res.Intents += len(page)
			for _, in := range page {
				listed[in.ID] = in
			}
			return c.comparePage(ctx, account, page, &res)
		})
	})
	if err != nil {
		return res, fmt.Errorf("ledger check: %w", err)
	}
	if err := c.checkSucceeded(ctx, from, to, listed, &res); err != nil {
		return res, fmt.Errorf("ledger check: %w", err)
	}
	return res, nil
}

// comparePage compares one page of the provider's intents, listed on
// account, with the payments they name (by metadata) or that recorded them.
// A payment of another account is not the intent's: an account's intent
// can name any payment id.
func (c *LedgerChecker) comparePage(ctx context.Context, account string, page []*provider.Intent, res *LedgerCheckResult) error {
	var paymentIDs, intentIDs []string
	for _, in := range page {
		if id := in.Metadata[MetadataPaymentID]; id != "" {
			paymentIDs = append(paymentIDs, id)
		}
		intentIDs = append(intentIDs, in.ID)
	}
	rows, err := c.pool.Query(ctx, `
		SELECT `+paymentColumns+` FROM payments WHERE id = ANY($1) OR provider_payment_intent_id = ANY($2)`,
		paymentIDs, intentIDs)
	if err != nil {
		return fmt.Errorf("read payments of listed intents: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[Payment])
	if err != nil {
		return fmt.Errorf("read payments of listed intents: %w", err)
	}
	byID, byIntent := map[string]Payment{}, map[string]Payment{}
	for _, r := range found {
		byID[r.ID] = r
		if r.ProviderPaymentIntentID != nil {
			byIntent[*r.ProviderPaymentIntentID] = r
		}
	}
	for _, in := range page {
		p, ok := byID[in.Metadata[MetadataPaymentID]]
		if ok && in.Metadata[MetadataTenantID] != "" && in.Metadata[MetadataTenantID] != p.TenantID {
			ok = false // the metadata names a payment of another tenant: not ours to match
		}
		if !ok {
			p, ok = byIntent[in.ID]
		}
		if ok && p.Account() != account {
			ok = false
		}
		evidence := map[string]any{"intent": intentEvidence(in)}
		if account != "" {
			evidence["account"] = account
		}
		if !ok {
			if mayHaveMoved(in) {
				if err := c.record(ctx, res, ledger.KindUnknownIntent, "", in.ID,
					fmt.Sprintf("intent %s (%s, %d %s) names no payment of ours", in.ID, in.Status, in.Amount, in.Currency), evidence); err != nil {
					return err
				}
			}
			continue
		}
		evidence["payment"] = paymentEvidence(p)
		if in.Amount != p.Amount || in.Currency != p.Currency {
			if err := c.record(ctx, res, ledger.KindAmountMismatch, p.ID, in.ID,
				fmt.Sprintf("intent %s is %d %s, payment %s is %d %s", in.ID, in.Amount, in.Currency, p.ID, p.Amount, p.Currency), evidence); err != nil {
				return err
			}
		}
		mineNow := intentOfGeneration(in, p) && (p.ProviderPaymentIntentID == nil || *p.ProviderPaymentIntentID == in.ID)
		sameAmount := in.Amount == p.Amount && in.Currency == p.Currency
		if sameAmount && mineNow && p.Status == StatusSucceeded && in.Status == stripe.PaymentIntentStatusSucceeded && in.AmountReceived != p.AmountCaptured {
			if err := c.record(ctx, res, ledger.KindAmountMismatch, p.ID, in.ID,
				fmt.Sprintf("intent %s received %d %s, payment %s records %d captured", in.ID, in.AmountReceived, in.Currency, p.ID, p.AmountCaptured), evidence); err != nil {
				return err
			}
		}
		succeeded := in.Status == stripe.PaymentIntentStatusSucceeded
		// An authorization holds the customer's money without moving it.
		held := in.Status == stripe.PaymentIntentStatusRequiresCapture
		mine := mineNow
		unsettled := time.Since(in.Created) > c.cfg.UnsettledAfter || p.Status == StatusRequiresReconciliation && p.ReconcileAfter == nil
		var kind, reason string
		switch {
		case !mine && (succeeded || held):
			kind, reason = ledger.KindUnexpectedCharge, fmt.Sprintf("intent %s (generation %s) is %s, but payment %s is %s under generation %d with intent %s",
				in.ID, generationOf(in), in.Status, p.ID, p.Status, p.ProviderKeyGeneration, deref(p.ProviderPaymentIntentID))
		case !mine:
		case (succeeded || held) && (p.Status == StatusFailed || p.Status == StatusCanceled):
			kind, reason = ledger.KindStatusMismatch, fmt.Sprintf("payment %s is %s (%s), but intent %s is %s", p.ID, p.Status, deref(p.FailureCode), in.ID, in.Status)
		case succeeded && p.Status != StatusSucceeded && unsettled:
			kind, reason = ledger.KindStatusMismatch, fmt.Sprintf("intent %s succeeded, but payment %s is still %s and nothing is going to settle it", in.ID, p.ID, p.Status)
		case held && p.Status != StatusRequiresCapture && p.Status != StatusSucceeded && unsettled:
			kind, reason = ledger.KindStatusMismatch, fmt.Sprintf("intent %s is authorized, but payment %s is still %s and nothing is going to settle it", in.ID, p.ID, p.Status)
		case p.Status == StatusSucceeded && (held || provider.OutcomeOf(in).Kind == provider.Declined):
			kind, reason = ledger.KindStatusMismatch, fmt.Sprintf("payment %s is succeeded, but intent %s is %s", p.ID, in.ID, in.Status)
		}
		if kind != "" {
			if err := c.record(ctx, res, kind, p.ID, in.ID, reason, evidence); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSucceeded looks for the intent of every payment that succeeded with
// a first provider attempt in [from, to]: one the listing did not show is
// read by id, and one that does not exist is a finding.
func (c *LedgerChecker) checkSucceeded(ctx context.Context, from, to time.Time, listed map[string]*provider.Intent, res *LedgerCheckResult) error {
	err := operation.EachSucceeded(ctx, c.pool, paymentsTable, paymentColumns, from, to,
		func(p Payment) string { return p.ID },
		func(p Payment) error {
			res.Payments++
			return c.checkIntentExists(ctx, p, listed, res)
		})
	if err != nil {
		return fmt.Errorf("check succeeded payments: %w", err)
	}
	return nil
}

func (c *LedgerChecker) checkIntentExists(ctx context.Context, p Payment, listed map[string]*provider.Intent, res *LedgerCheckResult) error {
	evidence := map[string]any{"payment": paymentEvidence(p)}
	if p.ProviderPaymentIntentID == nil {
		return c.record(ctx, res, ledger.KindMissingIntent, p.ID, "",
			fmt.Sprintf("payment %s is succeeded but records no intent", p.ID), evidence)
	}
	intentID := *p.ProviderPaymentIntentID
	if _, ok := listed[intentID]; ok {
		return nil // compared with the payment already
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	out := c.provider.For(p.Account()).RetrieveIntent(callCtx, intentID)
	cancel()
	switch {
	case out.Err != nil && out.HTTPStatus == http.StatusNotFound:
		evidence["provider_error"] = out.Err.Error()
		return c.record(ctx, res, ledger.KindMissingIntent, p.ID, intentID,
			fmt.Sprintf("payment %s is succeeded, but its intent %s does not exist at the provider", p.ID, intentID), evidence)
	case out.Err != nil:
		res.Unchecked++
		c.logger.WarnContext(ctx, "ledger check could not read an intent", slog.String("payment_id", p.ID),
			slog.String("intent_id", intentID), slog.Any("error", out.Err))
		return nil
	case out.Kind == provider.Succeeded:
		return nil
	}
	evidence["intent"] = intentEvidence(out.Intent)
	return c.record(ctx, res, ledger.KindStatusMismatch, p.ID, intentID,
		fmt.Sprintf("payment %s is succeeded, but intent %s is %s", p.ID, intentID, out.Intent.Status), evidence)
}

func (c *LedgerChecker) record(ctx context.Context, res *LedgerCheckResult, kind, paymentID, intentID, reason string, evidence map[string]any) error {
	d, err := ledger.Report(ctx, c.pool, c.logger, Disagreement{Kind: kind, PaymentID: paymentID, IntentID: intentID, Reason: reason}, evidence)
	if err != nil {
		return err
	}
	res.Disagreements = append(res.Disagreements, d)
	return nil
}

// mayHaveMoved reports whether an intent took money or still may: an
// unknown intent that did neither is noise, not a finding.
func mayHaveMoved(in *provider.Intent) bool {
	switch in.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresCapture:
		return true
	}
	return false
}

func intentEvidence(in *provider.Intent) map[string]any {
	return map[string]any{"id": in.ID, "status": in.Status, "amount": in.Amount, "currency": in.Currency,
		"created": in.Created, "metadata": in.Metadata}
}

func paymentEvidence(p Payment) map[string]any {
	return map[string]any{"id": p.ID, "tenant_id": p.TenantID, "status": p.Status, "amount": p.Amount, "currency": p.Currency,
		"generation": p.ProviderKeyGeneration, "intent_id": p.ProviderPaymentIntentID, "failure_code": p.FailureCode}
}

// LedgerCheckArgs is the LedgerChecker's periodic job.
type LedgerCheckArgs struct{}

// Kind is the job's River kind.
func (LedgerCheckArgs) Kind() string { return "ledger_check" }

// InsertOpts puts the job on the maintenance queue, one per tick.
func (LedgerCheckArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// LedgerCheckWorker runs the LedgerChecker over its window as a River job.
// Two runs side by side are harmless: a finding already open is not
// recorded again.
type LedgerCheckWorker struct {
	river.WorkerDefaults[LedgerCheckArgs]
	Checker *LedgerChecker
}

// Timeout lets a run list a large window page by page.
func (w *LedgerCheckWorker) Timeout(*river.Job[LedgerCheckArgs]) time.Duration {
	return 15 * time.Minute
}

// Work checks the window ending now.
func (w *LedgerCheckWorker) Work(ctx context.Context, _ *river.Job[LedgerCheckArgs]) error {
	to := time.Now()
	res, err := w.Checker.Check(ctx, to.Add(-w.Checker.cfg.Window), to)
	w.Checker.logger.InfoContext(ctx, "ledger check", slog.Int("intents", res.Intents), slog.Int("payments", res.Payments),
		slog.Int("disagreements", len(res.Disagreements)), slog.Int("new_findings", NewFindings(res.Disagreements)), slog.Int("unchecked", res.Unchecked), slog.Any("error", err))
	return err
}
