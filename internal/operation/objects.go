package operation

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/provider"
)

// MadeBy tells, among provider objects, the one made for op in its
// current generation (by its metadata, Table.MadeFor): FindOne's mine.
func MadeBy[Obj providerObject](t Table, op Entry) func(Obj) bool {
	return func(obj Obj) bool {
		_, metadata := obj.Ref()
		return t.MadeFor(metadata, op)
	}
}

// Reread is the error of a provider read of the object id: nil if it
// found it (found), the table's NotFound for an object the account does
// not have, the read's failure otherwise. Events are answered this way:
// by the object read again, never by the event's copy.
func (t Table) Reread(id string, found bool, read provider.Judgement) error {
	switch {
	case found:
		return nil
	case read.HTTPStatus == http.StatusNotFound:
		return fmt.Errorf("provider object %s: %w", id, t.NotFound)
	}
	return fmt.Errorf("read provider object %s: %w", id, read.Err)
}

// EachAccount calls fn, in turn, with each account that may hold the
// kind's objects made since since, and pc made for it: every tenant's
// connected account, any other account one of the kind's operations, or
// of their parents, of the window was made on (its tenant's account since
// changed) and, if platform, the platform's own (""). It stops at fn's
// first error.
func (t Table) EachAccount(ctx context.Context, db Querier, since time.Time, platform bool, pc *provider.Client,
	fn func(account string, pc *provider.Client) error) error {
	return eachAccount(ctx, db, since, platform, pc, t.Operation+"s", []Table{t}, fn)
}

// EachAccount is Table.EachAccount for the objects of every kind, the
// platform's account first: what the recovery of lost events lists, so
// that an account only one kind still uses (a tenant's former account with
// payouts alone) is not missed.
func (ks Kinds) EachAccount(ctx context.Context, db Querier, since time.Time, pc *provider.Client,
	fn func(account string, pc *provider.Client) error) error {
	tables := make([]Table, len(ks))
	for i, k := range ks {
		tables[i] = k.Table()
	}
	return eachAccount(ctx, db, since, true, pc, "operations", tables, fn)
}

func eachAccount(ctx context.Context, db Querier, since time.Time, platform bool, pc *provider.Client, noun string, tables []Table,
	fn func(account string, pc *provider.Client) error) error {
	var names []string
	for _, t := range tables {
		names = append(names, t.Name)
		if t.Parent != nil {
			names = append(names, t.Parent.Table)
		}
	}
	slices.Sort(names)
	var made string
	for _, name := range slices.Compact(names) {
		made += `
		UNION SELECT DISTINCT provider_account FROM ` + name + ` WHERE provider_account IS NOT NULL AND created_at >= $1`
	}
	rows, err := db.Query(ctx, `
		SELECT '' AS account WHERE $2
		UNION SELECT stripe_account FROM tenants WHERE stripe_account IS NOT NULL`+made+`
		ORDER BY account`, since, platform)
	var accounts []string
	if err == nil {
		accounts, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("list the %s' provider accounts: %w", noun, err)
	}
	for _, account := range accounts {
		if err := fn(account, pc.For(account)); err != nil {
			return fmt.Errorf("account %q: %w", account, err)
		}
	}
	return nil
}
