// Package ledger owns the ledger_findings table: disagreements between what
// oncepay recorded and what the payment provider says, kept for an operator
// with their evidence. A finding is never acted on automatically: a payment
// recorded final is not overwritten because an event or a lookup says
// otherwise; a person decides, and notes how it was resolved.
package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// Kinds of finding.
const (
	// KindStatusMismatch: the provider's object contradicts a payment's
	// final state (recorded failed but the intent succeeded, or the other
	// way round), or an intent succeeded long ago for a payment still not
	// final that nothing is going to settle.
	KindStatusMismatch = "status_mismatch"
	// KindUnexpectedCharge: an intent that succeeded is not the one the
	// payment records (another intent, or another generation's), so the
	// customer may have been charged twice.
	KindUnexpectedCharge = "unexpected_charge"
	// KindUnknownIntent: the provider has an intent that may have taken
	// money (succeeded, processing, awaiting capture) and names no payment
	// of ours.
	KindUnknownIntent = "unknown_intent"
	// KindAmountMismatch: an intent of one of our payments charges another
	// amount or currency than the payment records.
	KindAmountMismatch = "amount_mismatch"
	// KindMissingIntent: a payment recorded succeeded has no intent at the
	// provider (none recorded, or the one recorded does not exist).
	KindMissingIntent = "missing_intent"
	// KindUnknownRefund: the provider has a refund that returned money (or
	// still may) and names no refund of ours.
	KindUnknownRefund = "unknown_refund"
	// KindRefundAmountMismatch: a provider refund of one of our refunds
	// returns another amount or currency than the refund records.
	KindRefundAmountMismatch = "refund_amount_mismatch"
	// KindRefundStatusMismatch: the provider's refund contradicts our
	// refund's state (recorded failed or canceled but it succeeded, or the
	// other way round; another provider refund than the one recorded
	// succeeded), or it succeeded long ago for a refund still not final that
	// nothing is going to settle.
	KindRefundStatusMismatch = "refund_status_mismatch"
	// KindMissingRefund: a refund recorded succeeded has no refund at the
	// provider (none recorded, or the one recorded does not exist).
	KindMissingRefund = "missing_refund"
	// KindUnknownPayout: the provider has a payout that names a payout we
	// do not know.
	KindUnknownPayout = "unknown_payout"
	// KindPayoutMismatch: a provider payout contradicts our payout (another
	// amount, a status ours is ahead of, another payout than the one
	// recorded), or moved on long ago while ours still waits for it.
	KindPayoutMismatch = "payout_mismatch"
	// KindMissingPayout: a payout recorded made has no payout at the
	// provider (none recorded, or the one recorded does not exist).
	KindMissingPayout = "missing_payout"
	// KindDuplicateObject: a provider object names an operation of ours in
	// its current generation (by its metadata) while the operation records
	// another object: it was made twice at the provider, or its metadata
	// was copied onto another object. The operation keeps the object it
	// records; a person decides what the second one is.
	KindDuplicateObject = "duplicate_provider_object"
)

// Finding is one disagreement.
type Finding struct {
	ID        string  `db:"id" json:"id"`
	Kind      string  `db:"kind" json:"kind"`
	PaymentID *string `db:"payment_id" json:"payment_id"`
	// RefundID names the refund of a refund's finding, OperationID the
	// operation of another kind's (a payout's).
	RefundID         *string         `db:"refund_id" json:"refund_id"`
	OperationID      *string         `db:"operation_id" json:"operation_id"`
	ProviderObjectID *string         `db:"provider_object_id" json:"provider_object_id"`
	Evidence         json.RawMessage `db:"evidence" json:"evidence"`
	CreatedAt        time.Time       `db:"created_at" json:"created_at"`
	ResolvedAt       *time.Time      `db:"resolved_at" json:"resolved_at"`
	ResolutionNote   *string         `db:"resolution_note" json:"resolution_note"`
	ResolvedBy       *string         `db:"resolved_by" json:"resolved_by"`
}

// Execer runs statements: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Querier runs queries.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Record stores a finding unless the same disagreement (kind, payment,
// provider object) is already open, and reports whether it was new: the
// same contradiction seen by several events is one finding.
func Record(ctx context.Context, db Execer, kind, paymentID, providerObjectID string, evidence any) (bool, error) {
	return RecordRefund(ctx, db, kind, paymentID, "", providerObjectID, evidence)
}

// RecordRefund is Record for a finding about a refund of ours (refundID,
// of payment paymentID), or about a provider refund that names none
// (refundID empty).
func RecordRefund(ctx context.Context, db Execer, kind, paymentID, refundID, providerObjectID string, evidence any) (bool, error) {
	return record(ctx, db, kind, paymentID, refundID, "", providerObjectID, evidence)
}

func record(ctx context.Context, db Execer, kind, paymentID, refundID, operationID, providerObjectID string, evidence any) (bool, error) {
	raw, err := json.Marshal(evidence)
	if err != nil {
		return false, fmt.Errorf("encode finding evidence: %w", err)
	}
	tag, err := db.Exec(ctx, `
		INSERT INTO ledger_findings (id, kind, payment_id, refund_id, operation_id, provider_object_id, evidence)
		VALUES ($1, $2, nullif($3, ''), nullif($4, ''), nullif($5, ''), nullif($6, ''), $7)
		ON CONFLICT (kind, coalesce(payment_id, ''), coalesce(refund_id, ''), coalesce(operation_id, ''), coalesce(provider_object_id, ''))
			WHERE resolved_at IS NULL DO NOTHING`,
		id.New("lf"), kind, paymentID, refundID, operationID, providerObjectID, raw)
	if err != nil {
		return false, fmt.Errorf("record ledger finding: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Open lists the findings not yet resolved, oldest first.
func Open(ctx context.Context, db Querier) ([]Finding, error) {
	rows, err := db.Query(ctx, `
		SELECT `+findingColumns+`
		FROM ledger_findings WHERE resolved_at IS NULL ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list open findings: %w", err)
	}
	findings, err := pgx.CollectRows(rows, pgx.RowToStructByName[Finding])
	if err != nil {
		return nil, fmt.Errorf("list open findings: %w", err)
	}
	return findings, nil
}

// Disagreement is one mismatch a ledger check found, as reported.
type Disagreement struct {
	Kind      string `json:"kind"`
	PaymentID string `json:"payment_id,omitempty"`
	IntentID  string `json:"intent_id,omitempty"`
	// RefundID and ProviderRefundID name the refunds of a refund's
	// disagreement.
	RefundID         string `json:"refund_id,omitempty"`
	ProviderRefundID string `json:"provider_refund_id,omitempty"`
	// OperationID and ProviderObjectID name those of another kind's (a
	// payout's).
	OperationID      string `json:"operation_id,omitempty"`
	ProviderObjectID string `json:"provider_object_id,omitempty"`
	Reason           string `json:"reason"`
	// New is false when the same disagreement was already an open finding.
	New bool `json:"new"`
}

// File records d as a finding (one open finding per disagreement), with
// its evidence, its reason and what found it (source), and returns it with
// New set.
func File(ctx context.Context, db Execer, source string, d Disagreement, evidence map[string]any) (Disagreement, error) {
	evidence["reason"] = d.Reason
	evidence["source"] = source
	var err error
	d.New, err = record(ctx, db, d.Kind, d.PaymentID, d.RefundID, d.OperationID, cmp.Or(d.ProviderRefundID, d.IntentID, d.ProviderObjectID), evidence)
	return d, err
}

// Report records a disagreement a ledger check found as a finding (one open
// finding per disagreement), with its evidence and reason, logs it when it
// is new, and returns it with New set.
func Report(ctx context.Context, db Execer, logger *slog.Logger, d Disagreement, evidence map[string]any) (Disagreement, error) {
	d, err := File(ctx, db, "ledger_check", d, evidence)
	if err != nil {
		return d, err
	}
	if d.New {
		logger.WarnContext(ctx, "ledger check found a disagreement", slog.String("kind", d.Kind), slog.String("payment_id", d.PaymentID),
			slog.String("intent_id", d.IntentID), slog.String("refund_id", d.RefundID), slog.String("provider_refund_id", d.ProviderRefundID),
			slog.String("operation_id", d.OperationID), slog.String("provider_object_id", d.ProviderObjectID),
			slog.String("reason", d.Reason))
	}
	return d, nil
}
