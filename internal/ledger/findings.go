package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

const findingColumns = `id, kind, payment_id, refund_id, operation_id, provider_object_id, evidence, created_at, resolved_at, resolution_note, resolved_by`

// ErrNotFound is returned by Resolve for a finding that does not exist.
var ErrNotFound = errors.New("ledger finding not found")

// ErrResolved is returned by Resolve for a finding already resolved: the
// first note stands.
var ErrResolved = errors.New("ledger finding already resolved")

// DB runs queries and single-row queries: a pool, a connection or a
// transaction.
type DB interface {
	Querier
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Filter selects findings for List.
type Filter struct {
	// OpenOnly leaves out resolved findings.
	OpenOnly bool
	// PaymentID, if set, keeps the findings about one payment.
	PaymentID string
	// Limit caps the list, newest first. Defaults to 100.
	Limit int
}

// List returns findings, newest first.
func List(ctx context.Context, db Querier, f Filter) ([]Finding, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := db.Query(ctx, `
		SELECT `+findingColumns+` FROM ledger_findings
		WHERE (NOT $1 OR resolved_at IS NULL) AND ($2 = '' OR payment_id = $2)
		ORDER BY created_at DESC, id DESC
		LIMIT $3`, f.OpenOnly, f.PaymentID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	findings, err := pgx.CollectRows(rows, pgx.RowToStructByName[Finding])
	if err != nil {
		return nil, fmt.Errorf("list findings: %w", err)
	}
	return findings, nil
}

// Resolve closes an open finding with how it was resolved and by whom.
// Resolving changes nothing else: whatever the note says was done (a
// refund, a corrected row) was done by the operator.
func Resolve(ctx context.Context, db DB, findingID, note, operator string) (Finding, error) {
	note, operator = strings.TrimSpace(note), strings.TrimSpace(operator)
	if note == "" || operator == "" {
		return Finding{}, errors.New("resolving a finding needs a note and an operator")
	}
	rows, err := db.Query(ctx, `
		UPDATE ledger_findings SET resolved_at = now(), resolution_note = $2, resolved_by = $3
		WHERE id = $1 AND resolved_at IS NULL
		RETURNING `+findingColumns, findingID, note, operator)
	if err != nil {
		return Finding{}, fmt.Errorf("resolve finding: %w", err)
	}
	f, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Finding])
	if errors.Is(err, pgx.ErrNoRows) {
		var resolved bool
		err := db.QueryRow(ctx, `SELECT resolved_at IS NOT NULL FROM ledger_findings WHERE id = $1`, findingID).Scan(&resolved)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return Finding{}, fmt.Errorf("finding %s: %w", findingID, ErrNotFound)
		case err != nil:
			return Finding{}, fmt.Errorf("resolve finding: %w", err)
		}
		return Finding{}, fmt.Errorf("finding %s: %w", findingID, ErrResolved)
	}
	if err != nil {
		return Finding{}, fmt.Errorf("resolve finding: %w", err)
	}
	return f, nil
}
