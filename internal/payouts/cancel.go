package payouts

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// cancelling names the cancel's job: River kind "cancel_payout", one live
// per payout however often a cancel is asked for.
type cancelling struct{}

func (cancelling) Name() string { return "cancel_payout" }

type cancelArgs = operation.Args[cancelling]

// cancelWorker cancels a payout still pending at the provider and records
// the payout as the provider then has it. Canceling twice cancels once, so
// a retry needs nothing more than the key derived from the payout's.
type cancelWorker struct {
	river.WorkerDefaults[cancelArgs]
	env operation.Env
}

func (w *cancelWorker) Timeout(*river.Job[cancelArgs]) time.Duration {
	return w.env.Worker.WithDefaults().JobTimeout
}

func (w *cancelWorker) Work(ctx context.Context, job *river.Job[cancelArgs]) error {
	p, err := rowsOf(w.env.Keys).Load(ctx, w.env.Pool, job.Args.TenantID, job.Args.ID)
	if err != nil || p.Status != StatusPending || p.ProviderPayoutID == nil {
		return err
	}
	pc := w.env.Provider.For(p.ProviderAccount)
	out := pc.CancelPayout(ctx, *p.ProviderPayoutID, operation.ProviderKey("payout_cancel", p.TenantID, p.IdempotencyKey, p.ID, p.ProviderKeyGeneration))
	if out.Kind == provider.Rejected { // no longer pending: record what it is now
		out = pc.RetrievePayout(ctx, *p.ProviderPayoutID)
	}
	if out.Payout == nil {
		return fmt.Errorf("cancel payout %s: %w", p.ID, out.Err)
	}
	_, _, err = Settle(ctx, w.env.Pool, w.env.Keys, p.ProviderAccount, out.Payout)
	return err
}
