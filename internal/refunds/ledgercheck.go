package refunds

import (
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
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
)

// LedgerChecker compares the provider's refunds with our refunds and
// records every disagreement as a ledger finding, as payments.LedgerChecker
// does for intents and payments. It only reads at the provider (lists
// refunds, reads one by id): it never refunds or cancels, and never changes
// a refund.
type LedgerChecker struct {
	pool     *pgxpool.Pool
	provider *provider.Client
	logger   *slog.Logger
	cfg      payments.LedgerCheckConfig
}

// NewLedgerChecker returns a LedgerChecker with the payments check's
// settings (window, clock skew, unsettled delay, call timeout, pages).
func NewLedgerChecker(pool *pgxpool.Pool, pc *provider.Client, logger *slog.Logger, cfg payments.LedgerCheckConfig) *LedgerChecker {
	return &LedgerChecker{pool: pool, provider: pc, logger: logger, cfg: cfg.WithDefaults()}
}

// LedgerCheckResult is what one check of refunds saw and found.
type LedgerCheckResult struct {
	From, To time.Time
	// Listed is how many refunds the provider listed; Succeeded how many
	// succeeded refunds of the window were looked for at the provider.
	Listed, Succeeded int
	// Unchecked counts refunds whose provider refund could not be read (a
	// provider error): the next check looks again.
	Unchecked     int
	Disagreements []payments.Disagreement
}

// Check compares the provider refunds created in [from, to] (widened by
// the clock skew) with our refunds, and the refunds that succeeded with a
// first provider attempt in [from, to] with the provider's refunds.
//
// Each account that holds payments is listed, as for the payments' check.
func (c *LedgerChecker) Check(ctx context.Context, from, to time.Time) (LedgerCheckResult, error) {
	res := LedgerCheckResult{From: from, To: to}
	// A refund may come long after its payment: every account that any
	// payment used is listed.
	listed := map[string]*provider.Refund{}
	window := provider.ListWindow{CreatedFrom: from.Add(-c.cfg.ClockSkew), CreatedTo: to.Add(c.cfg.ClockSkew), MaxPages: c.cfg.MaxPages}
	err := payments.EachAccount(ctx, c.pool, time.Time{}, c.provider, func(account string, pc *provider.Client) error {
		return pc.ListRefundsCreated(ctx, window, func(page []*provider.Refund) error {
			res.Listed += len(page)
			for _, re := range page {
				listed[re.ID] = re
			}
			return c.comparePage(ctx, account, page, &res)
		})
	})
	if err != nil {
		return res, fmt.Errorf("ledger check of refunds: %w", err)
	}
	if err := c.checkSucceeded(ctx, from, to, listed, &res); err != nil {
		return res, fmt.Errorf("ledger check of refunds: %w", err)
	}
	return res, nil
}

// comparePage compares one page of the provider's refunds, listed on
// account, with the refunds they name (by metadata) or that recorded them;
// a refund of another account is not theirs.
func (c *LedgerChecker) comparePage(ctx context.Context, account string, page []*provider.Refund, res *LedgerCheckResult) error {
	var refundIDs, providerIDs, intentIDs []string
	for _, re := range page {
		if id := re.Metadata[MetadataRefundID]; id != "" {
			refundIDs = append(refundIDs, id)
		}
		providerIDs = append(providerIDs, re.ID)
		intentIDs = append(intentIDs, re.PaymentIntentID)
	}
	rows, err := c.pool.Query(ctx, `
		SELECT `+refundColumns+` FROM refunds WHERE id = ANY($1) OR provider_refund_id = ANY($2)`, refundIDs, providerIDs)
	if err != nil {
		return fmt.Errorf("read refunds of listed provider refunds: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[Refund])
	if err != nil {
		return fmt.Errorf("read refunds of listed provider refunds: %w", err)
	}
	byID, byProviderID := map[string]Refund{}, map[string]Refund{}
	for _, r := range found {
		byID[r.ID] = r
		if r.ProviderRefundID != nil {
			byProviderID[*r.ProviderRefundID] = r
		}
	}
	// A refund we do not know is filed under the payment whose intent it
	// refunded, when that payment is ours.
	rows, err = c.pool.Query(ctx, `
		SELECT provider_payment_intent_id, id FROM payments WHERE provider_payment_intent_id = ANY($1)`, intentIDs)
	if err != nil {
		return fmt.Errorf("read payments of listed provider refunds: %w", err)
	}
	pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ IntentID, PaymentID string }])
	if err != nil {
		return fmt.Errorf("read payments of listed provider refunds: %w", err)
	}
	paymentOfIntent := map[string]string{}
	for _, p := range pairs {
		paymentOfIntent[p.IntentID] = p.PaymentID
	}

	for _, re := range page {
		r, ok := byID[re.Metadata[MetadataRefundID]]
		if ok && re.Metadata[MetadataTenantID] != "" && re.Metadata[MetadataTenantID] != r.TenantID {
			ok = false // the metadata names a refund of another tenant: not ours to match
		}
		if !ok {
			r, ok = byProviderID[re.ID]
		}
		if ok && r.Account() != account {
			ok = false
		}
		evidence := map[string]any{"provider_refund": providerRefundEvidence(re)}
		if account != "" {
			evidence["account"] = account
		}
		if !ok {
			if re.Status == stripe.RefundStatusSucceeded || re.Status == stripe.RefundStatusPending || re.Status == stripe.RefundStatusRequiresAction {
				if err := c.record(ctx, res, ledger.KindUnknownRefund, paymentOfIntent[re.PaymentIntentID], "", re.ID,
					fmt.Sprintf("provider refund %s (%s, %d %s of intent %s) names no refund of ours", re.ID, re.Status, re.Amount, re.Currency, re.PaymentIntentID),
					evidence); err != nil {
					return err
				}
			}
			continue
		}
		evidence["refund"] = refundEvidence(r)
		if re.Amount != r.Amount || re.Currency != r.Currency {
			if err := c.record(ctx, res, ledger.KindRefundAmountMismatch, r.PaymentID, r.ID, re.ID,
				fmt.Sprintf("provider refund %s is %d %s, refund %s is %d %s", re.ID, re.Amount, re.Currency, r.ID, r.Amount, r.Currency), evidence); err != nil {
				return err
			}
		}
		succeeded := re.Status == stripe.RefundStatusSucceeded
		recorded := r.ProviderRefundID == nil || *r.ProviderRefundID == re.ID
		var reason string
		switch {
		case !recorded && succeeded:
			reason = fmt.Sprintf("provider refund %s (generation %s) succeeded, but refund %s is %s with provider refund %s: the money may have gone back twice",
				re.ID, re.Metadata[MetadataGeneration], r.ID, r.Status, deref(r.ProviderRefundID))
		case !recorded:
		case succeeded && (r.Status == StatusFailed || r.Status == StatusCanceled):
			reason = fmt.Sprintf("refund %s is %s (%s), but provider refund %s succeeded", r.ID, r.Status, deref(r.FailureCode), re.ID)
		case succeeded && !final(r.Status) && (time.Since(re.Created) > c.cfg.UnsettledAfter ||
			r.Status == StatusRequiresReconciliation && r.ReconcileAfter == nil):
			reason = fmt.Sprintf("provider refund %s succeeded, but refund %s is still %s and nothing is going to settle it", re.ID, r.ID, r.Status)
		case r.Status == StatusSucceeded && provider.RefundOutcomeOf(re).Kind == provider.Declined:
			reason = fmt.Sprintf("refund %s is succeeded, but provider refund %s is %s", r.ID, re.ID, re.Status)
		}
		if reason != "" {
			if err := c.record(ctx, res, ledger.KindRefundStatusMismatch, r.PaymentID, r.ID, re.ID, reason, evidence); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSucceeded looks for the provider refund of every refund that
// succeeded with a first provider attempt in [from, to]: one the listing
// did not show is read by id, and one that does not exist is a finding.
func (c *LedgerChecker) checkSucceeded(ctx context.Context, from, to time.Time, listed map[string]*provider.Refund, res *LedgerCheckResult) error {
	err := operation.EachSucceeded(ctx, c.pool, refundsTable, refundColumns, from, to,
		func(r Refund) string { return r.ID },
		func(r Refund) error {
			res.Succeeded++
			return c.checkProviderRefund(ctx, r, listed, res)
		})
	if err != nil {
		return fmt.Errorf("check succeeded refunds: %w", err)
	}
	return nil
}

func (c *LedgerChecker) checkProviderRefund(ctx context.Context, r Refund, listed map[string]*provider.Refund, res *LedgerCheckResult) error {
	evidence := map[string]any{"refund": refundEvidence(r)}
	if r.ProviderRefundID == nil {
		return c.record(ctx, res, ledger.KindMissingRefund, r.PaymentID, r.ID, "",
			fmt.Sprintf("refund %s is succeeded but records no provider refund", r.ID), evidence)
	}
	providerID := *r.ProviderRefundID
	if _, ok := listed[providerID]; ok {
		return nil // compared with the refund already
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	out := c.provider.For(r.Account()).RetrieveRefund(callCtx, providerID)
	cancel()
	switch {
	case out.Err != nil && out.HTTPStatus == http.StatusNotFound:
		evidence["provider_error"] = out.Err.Error()
		return c.record(ctx, res, ledger.KindMissingRefund, r.PaymentID, r.ID, providerID,
			fmt.Sprintf("refund %s is succeeded, but its provider refund %s does not exist", r.ID, providerID), evidence)
	case out.Err != nil:
		res.Unchecked++
		c.logger.WarnContext(ctx, "ledger check could not read a provider refund", slog.String("refund_id", r.ID),
			slog.String("provider_refund_id", providerID), slog.Any("error", out.Err))
		return nil
	}
	evidence["provider_refund"] = providerRefundEvidence(out.Refund)
	if out.Refund.Amount != r.Amount || out.Refund.Currency != r.Currency {
		if err := c.record(ctx, res, ledger.KindRefundAmountMismatch, r.PaymentID, r.ID, providerID,
			fmt.Sprintf("provider refund %s is %d %s, refund %s is %d %s", providerID, out.Refund.Amount, out.Refund.Currency, r.ID, r.Amount, r.Currency),
			evidence); err != nil {
			return err
		}
	}
	if out.Kind == provider.Succeeded {
		return nil
	}
	return c.record(ctx, res, ledger.KindRefundStatusMismatch, r.PaymentID, r.ID, providerID,
		fmt.Sprintf("refund %s is succeeded, but provider refund %s is %s", r.ID, providerID, out.Refund.Status), evidence)
}

func (c *LedgerChecker) record(ctx context.Context, res *LedgerCheckResult, kind, paymentID, refundID, providerRefundID, reason string, evidence map[string]any) error {
	d, err := ledger.Report(ctx, c.pool, c.logger, payments.Disagreement{Kind: kind, PaymentID: paymentID, RefundID: refundID,
		ProviderRefundID: providerRefundID, Reason: reason}, evidence)
	if err != nil {
		return err
	}
	res.Disagreements = append(res.Disagreements, d)
	return nil
}

func final(s Status) bool { return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled }

func providerRefundEvidence(re *provider.Refund) map[string]any {
	return map[string]any{"id": re.ID, "status": re.Status, "amount": re.Amount, "currency": re.Currency,
		"payment_intent": re.PaymentIntentID, "created": re.Created, "metadata": re.Metadata}
}

func refundEvidence(r Refund) map[string]any {
	return map[string]any{"id": r.ID, "tenant_id": r.TenantID, "payment_id": r.PaymentID, "status": r.Status, "amount": r.Amount,
		"currency": r.Currency, "generation": r.ProviderKeyGeneration, "provider_refund_id": r.ProviderRefundID,
		"failure_code": r.FailureCode}
}

// LedgerCheckArgs is the refund LedgerChecker's periodic job.
type LedgerCheckArgs struct{}

// Kind is the job's River kind.
func (LedgerCheckArgs) Kind() string { return "ledger_check_refunds" }

// InsertOpts puts the job on the maintenance queue, one per tick.
func (LedgerCheckArgs) InsertOpts() river.InsertOpts { return operation.MaintenanceInsertOpts() }

// LedgerCheckWorker runs the refund LedgerChecker over its window as a
// River job. Two runs side by side are harmless: a finding already open is
// not recorded again.
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
	w.Checker.logger.InfoContext(ctx, "ledger check of refunds", slog.Int("provider_refunds", res.Listed), slog.Int("succeeded_refunds", res.Succeeded),
		slog.Int("disagreements", len(res.Disagreements)), slog.Int("new_findings", payments.NewFindings(res.Disagreements)), slog.Int("unchecked", res.Unchecked), slog.Any("error", err))
	return err
}
