package refunds

import (
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/outbox"
)

// RefundMaxAttempts is how many times a refund job runs before its refund is
// handed to reconciliation: as for charges, about two hours with the default
// backoff, well inside the provider's 24-hour idempotency window.
const RefundMaxAttempts = outbox.ChargeMaxAttempts

// RefundPaymentArgs asks the worker to refund (part of) a payment at the
// provider: one refund row, whose amount and key are fixed.
type RefundPaymentArgs struct {
	TenantID string `json:"tenant_id"`
	RefundID string `json:"refund_id"`
}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (RefundPaymentArgs) Kind() string { return "refund_payment" }

// InsertOpts makes a refund job unique per refund while one is live, on the
// payments queue beside the charges. Finished states are left out, so a
// refund resumed under its next generation gets a new job.
func (RefundPaymentArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueuePayments,
		MaxAttempts: RefundMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: outbox.LiveJobStates()},
	}
}
