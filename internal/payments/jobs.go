package payments

import (
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/outbox"
)

// ChargePaymentArgs asks the worker to charge one payment at the provider.
type ChargePaymentArgs struct {
	TenantID  string `json:"tenant_id"`
	PaymentID string `json:"payment_id"`
}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (ChargePaymentArgs) Kind() string { return "charge_payment" }

// Of names the job's payment.
func (a ChargePaymentArgs) Of() (tenantID, paymentID string) { return a.TenantID, a.PaymentID }

// InsertOpts makes a charge job unique per payment while one is live, a
// second guard (after the idempotency key) against two jobs charging the
// same payment at once. Finished states are left out of the uniqueness, so
// a payment whose key was re-acquired can be charged again by a new job.
func (ChargePaymentArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueuePayments,
		MaxAttempts: outbox.ChargeMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: outbox.LiveJobStates()},
	}
}
