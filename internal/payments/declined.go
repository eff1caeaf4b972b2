package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stripe/stripe-go/v76"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/provider"
)

// A decline is recorded only once its intent is closed (closeIntent), and
// the payment is then marked checked (intent_checked_at). Payments recorded
// failed before that, by the previous release or by an old worker during a
// rolling deploy, have no mark: their intent may still be
// requires_payment_method, which the customer's client can confirm with
// another card after it was told 402, and no event of theirs will come
// again to close it. The DeclineCloser reads each of them once.

// DeclineCloser closes the intents that failed payments left open: a
// failed payment with an intent and no mark has its intent read; one still
// open (requires_payment_method, requires_confirmation, requires_action)
// is canceled under the payment's cancel key, so a retried cancel is the
// same cancel; one canceled is marked; one that took or holds money
// (succeeded, requires_capture) is a ledger finding (status_mismatch) and
// the payment is left as it is: an operator decides. A processing intent
// is a finding too, and read again next run: it may yet fail and be open.
type DeclineCloser struct {
	pool     *pgxpool.Pool
	provider *provider.Client
	logger   *slog.Logger
	// Batch caps the payments read per run. Defaults to 100.
	Batch int
	// Budget bounds a run: no payment is read once it is spent (the first
	// always is, so every run moves on). Defaults to 20s.
	Budget time.Duration
	// CallTimeout bounds the provider calls about one payment (a read, a
	// cancel, a read back). Defaults to 20s.
	CallTimeout time.Duration

	// mu keeps one run at a time on this closer; after is the last
	// payment a run read, where the next one goes on, so that payments
	// whose intent cannot be read (looked at again each round) never hold
	// up those behind them. A restart forgets it harmlessly: what was done
	// is marked on the rows.
	mu    sync.Mutex
	after string
}

// NewDeclineCloser returns the DeclineCloser.
func NewDeclineCloser(pool *pgxpool.Pool, pc *provider.Client, logger *slog.Logger) *DeclineCloser {
	return &DeclineCloser{pool: pool, provider: pc, logger: logger}
}

// CloseDeclinesResult counts what a run did.
type CloseDeclinesResult struct {
	// Looked is how many failed payments had their intent read. Of them,
	// Closed had it canceled by this run, AlreadyClosed found it canceled,
	// Found it had taken or held money (a finding each; New of them were
	// not already open), and Unsettled could not be read or closed, or
	// were processing: they are read again by a later run.
	Looked, Closed, AlreadyClosed, Found, New, Unsettled int
}

func (c *DeclineCloser) batch() int                 { return cmp.Or(c.Batch, 100) }
func (c *DeclineCloser) budget() time.Duration      { return cmp.Or(c.Budget, 20*time.Second) }
func (c *DeclineCloser) callTimeout() time.Duration { return cmp.Or(c.CallTimeout, 20*time.Second) }

// Run reads up to Batch unmarked failed payments, in id order from where
// the last run stopped (round to the first past the last), within Budget.
func (c *DeclineCloser) Run(ctx context.Context) (CloseDeclinesResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var res CloseDeclinesResult
	deadline := time.Now().Add(c.budget())
	failed, err := uncheckedDeclines(ctx, c.pool, c.after, c.batch())
	if err != nil {
		return res, err
	}
	for i, p := range failed {
		if i > 0 && !time.Now().Before(deadline) {
			break
		}
		res.Looked++
		if err := c.close(ctx, p, &res); err != nil {
			return res, err
		}
		c.after = p.ID
	}
	return res, nil
}

// close reads p's intent and closes it, marks p, or records the finding.
func (c *DeclineCloser) close(ctx context.Context, p Payment, res *CloseDeclinesResult) error {
	intentID := deref(p.ProviderPaymentIntentID)
	log := c.logger.With(slog.String("tenant_id", p.TenantID), slog.String("payment_id", p.ID), slog.String("intent_id", intentID))
	callCtx, cancel := context.WithTimeout(ctx, c.callTimeout())
	defer cancel()
	out := c.provider.For(p.Account()).RetrieveIntent(callCtx, intentID)
	canceledHere := false
	if out.Kind != provider.Ambiguous && out.Intent != nil && stillOpen(out.Intent.Status) {
		out = closeIntent(callCtx, c.provider, p, out)
		canceledHere = true
	}
	if out.Kind == provider.Ambiguous || out.Intent == nil {
		res.Unsettled++
		log.WarnContext(ctx, "could not read or close a failed payment's intent; looking again next run", slog.Any("error", out.Err))
		return nil
	}
	in := out.Intent
	switch in.Status {
	case stripe.PaymentIntentStatusCanceled:
		if err := markIntentChecked(ctx, c.pool, p); err != nil {
			return err
		}
		if canceledHere {
			res.Closed++
			log.InfoContext(ctx, "canceled the intent a failed payment had left open")
		} else {
			res.AlreadyClosed++
		}
		return nil
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusProcessing:
		isNew, err := c.recordTakenMoney(ctx, p, in)
		if err != nil {
			return err
		}
		res.Found++
		if isNew {
			res.New++
			log.WarnContext(ctx, "a failed payment's intent took or holds money: ledger finding", slog.String("intent_status", string(in.Status)))
		}
		if in.Status == stripe.PaymentIntentStatusProcessing {
			res.Unsettled++
		}
		return nil
	}
	res.Unsettled++
	log.WarnContext(ctx, "a failed payment's intent is in a state the close does not know; looking again next run", slog.String("intent_status", string(in.Status)))
	return nil
}

// recordTakenMoney records that in, the intent of failed payment p, took or
// holds money (or may: processing), and marks p unless in is processing,
// in one transaction: the mark's row lock comes first, as in every change
// of a payment.
func (c *DeclineCloser) recordTakenMoney(ctx context.Context, p Payment, in *provider.Intent) (bool, error) {
	reason := fmt.Sprintf("payment %s is failed (%s), but intent %s is %s", p.ID, deref(p.FailureCode), in.ID, in.Status)
	var isNew bool
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if in.Status != stripe.PaymentIntentStatusProcessing {
			if err := markIntentChecked(ctx, tx, p); err != nil {
				return err
			}
		}
		var err error
		isNew, err = ledger.Record(ctx, tx, ledger.KindStatusMismatch, p.ID, in.ID, map[string]any{
			"reason": reason, "source": "declined_intent_close", "payment": paymentEvidence(p), "intent": intentEvidence(in),
		})
		return err
	})
	return isNew, err
}

// stillOpen reports whether an intent in status can still be confirmed,
// or is waiting for its customer to finish: a declined payment's intent
// must be neither.
func stillOpen(status stripe.PaymentIntentStatus) bool {
	switch status {
	case stripe.PaymentIntentStatusRequiresPaymentMethod, stripe.PaymentIntentStatusRequiresConfirmation,
		stripe.PaymentIntentStatusRequiresAction:
		return true
	}
	return false
}

// uncheckedDeclines reads up to limit failed payments whose intent is not
// known closed (those the index payments_unchecked_declines_idx holds), in
// id order from the first after after, going round to the first of all
// past the last. A payment proven never to have reached the provider has
// no intent to close.
func uncheckedDeclines(ctx context.Context, db operation.Querier, after string, limit int) ([]Payment, error) {
	next, err := uncheckedDeclinesBetween(ctx, db, after, "", limit)
	if err != nil || len(next) == limit || after == "" {
		return next, err
	}
	first, err := uncheckedDeclinesBetween(ctx, db, "", after, limit-len(next))
	return append(next, first...), err
}

// uncheckedDeclinesBetween is uncheckedDeclines over the ids after from,
// up to and including to ("": the last).
func uncheckedDeclinesBetween(ctx context.Context, db operation.Querier, from, to string, limit int) ([]Payment, error) {
	rows, err := db.Query(ctx, `
		SELECT `+paymentColumns+` FROM payments
		WHERE status = 'failed' AND provider_payment_intent_id IS NOT NULL AND intent_checked_at IS NULL
			AND failure_code IS DISTINCT FROM $1 AND id > $2 AND ($3 = '' OR id <= $3)
		ORDER BY id LIMIT $4`, operation.FailureProviderNotReached, from, to, limit)
	return postgres.CollectAll[Payment](rows, err, "find failed payments with an unchecked intent")
}

// markIntentChecked notes that the intent of failed payment p can take no
// more money, or that a finding says it did: no run reads it again. The
// payment's state and updated_at are not touched: nothing changed in it.
func markIntentChecked(ctx context.Context, db operation.Querier, p Payment) error {
	_, err := db.Exec(ctx, `
		UPDATE payments SET intent_checked_at = now()
		WHERE tenant_id = $1 AND id = $2 AND status = 'failed' AND provider_payment_intent_id = $3 AND intent_checked_at IS NULL`,
		p.TenantID, p.ID, deref(p.ProviderPaymentIntentID))
	if err != nil {
		return fmt.Errorf("mark the intent of payment %s checked: %w", p.ID, err)
	}
	return nil
}

// CloseDeclinedIntentsArgs is the DeclineCloser's periodic job.
type CloseDeclinedIntentsArgs struct{}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (CloseDeclinedIntentsArgs) Kind() string { return "close_declined_intents" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (CloseDeclinedIntentsArgs) InsertOpts() river.InsertOpts {
	return operation.MaintenanceInsertOpts()
}

// CloseDeclinesWorker runs the DeclineCloser as a River job.
type CloseDeclinesWorker struct {
	river.WorkerDefaults[CloseDeclinedIntentsArgs]
	Closer *DeclineCloser
}

// Timeout lets a run use its budget and finish the payment in hand,
// whatever the client's default job timeout.
func (w *CloseDeclinesWorker) Timeout(*river.Job[CloseDeclinedIntentsArgs]) time.Duration {
	return w.Closer.budget() + w.Closer.callTimeout() + 10*time.Second
}

// Work runs one pass.
func (w *CloseDeclinesWorker) Work(ctx context.Context, _ *river.Job[CloseDeclinedIntentsArgs]) error {
	res, err := w.Closer.Run(ctx)
	if res.Looked > 0 || err != nil {
		w.Closer.logger.InfoContext(ctx, "declined intents pass", slog.Int("looked", res.Looked), slog.Int("closed", res.Closed),
			slog.Int("already_closed", res.AlreadyClosed), slog.Int("found", res.Found), slog.Int("new_findings", res.New),
			slog.Int("unsettled", res.Unsettled), slog.Any("error", err))
	}
	return err
}
