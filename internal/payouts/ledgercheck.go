package payouts

import (
	"context"
	"fmt"
	"time"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// audit is the payouts' side of the ledger check: the provider's payouts
// on every tenant's connected account, compared with ours.
type audit struct{ operation.Env }

func (a audit) List(ctx context.Context, w provider.ListWindow, page func(string, []*provider.Payout) error) error {
	return table.EachAccount(ctx, a.Pool, w.CreatedFrom, false, a.Provider, func(account string, pc *provider.Client) error {
		return pc.ListPayoutsCreated(ctx, w, func(p []*provider.Payout) error { return page(account, p) })
	})
}

func (a audit) Retrieve(ctx context.Context, p Payout, id string) operation.Read[*provider.Payout] {
	out := a.Provider.For(p.Account()).RetrievePayout(ctx, id)
	return operation.ReadOf(out.Payout, out.Judge())
}

// Compare: a payout naming one of ours we do not know; ours made with
// another amount, or another payout than the one recorded; ours ahead of
// the provider's status; or the provider's moved on long ago while ours
// waits. A payout naming none of ours is the account's own (its schedule).
func (audit) Compare(_ context.Context, po *provider.Payout, matched *Payout, cfg operation.LedgerCheckConfig) ([]operation.Finding, error) {
	if _, named := table.Named(po.Metadata); matched == nil && named == "" {
		return nil, nil
	} else if matched == nil {
		return []operation.Finding{finding(ledger.KindUnknownPayout, named, po,
			fmt.Sprintf("provider payout %s (%s, %d %s) names payout %s, which we do not know", po.ID, po.Status, po.Amount, po.Currency, named))}, nil
	}
	p, theirs := *matched, Status(po.Status)
	var reason string
	switch {
	case po.Amount != p.Amount || po.Currency != p.Currency:
		reason = fmt.Sprintf("provider payout %s is %d %s, payout %s is %d %s", po.ID, po.Amount, po.Currency, p.ID, p.Amount, p.Currency)
	case p.ProviderPayoutID != nil && *p.ProviderPayoutID != po.ID:
		reason = fmt.Sprintf("payout %s records provider payout %s, but %s was made for it too: paid out twice?", p.ID, *p.ProviderPayoutID, po.ID)
	case stage(p.Status) > stage(theirs):
		reason = fmt.Sprintf("payout %s is %s, ahead of provider payout %s, %s", p.ID, p.Status, po.ID, theirs)
	case stage(theirs) > stage(p.Status) && time.Since(po.Created) > cfg.UnsettledAfter:
		reason = fmt.Sprintf("provider payout %s is %s, but payout %s is still %s and nothing is going to settle it", po.ID, theirs, p.ID, p.Status)
	}
	if reason == "" {
		return nil, nil
	}
	return []operation.Finding{finding(ledger.KindPayoutMismatch, p.ID, po, reason)}, nil
}

func (audit) Confirm(p Payout, read operation.Read[*provider.Payout]) []operation.Finding {
	if stage(p.Status) <= stage(Status(read.Obj.Status)) {
		return nil
	}
	return []operation.Finding{finding(ledger.KindPayoutMismatch, p.ID, read.Obj,
		fmt.Sprintf("payout %s is %s, ahead of provider payout %s, %s", p.ID, p.Status, read.Obj.ID, read.Obj.Status))}
}

func finding(kind, payoutID string, po *provider.Payout, reason string) operation.Finding {
	return operation.Finding{Disagreement: ledger.Disagreement{Kind: kind, OperationID: payoutID, ProviderObjectID: po.ID, Reason: reason},
		Evidence: map[string]any{"provider_payout": po}}
}

// newLedgerChecker is the payouts' ledger check, on the engine's.
func newLedgerChecker(env operation.Env) operation.LedgerPass {
	return operation.NewLedgerChecker(env.Pool, env.Logger, env.Ledger, table, audit{env})
}
