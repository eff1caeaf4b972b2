package authorizations

import (
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/outbox"
)

// ActPaymentArgs asks the worker to send one capture or cancel to the
// provider.
type ActPaymentArgs struct {
	TenantID string `json:"tenant_id"`
	ActionID string `json:"action_id"`
}

// Kind is the job's River kind; never rename it while jobs may be queued.
func (ActPaymentArgs) Kind() string { return "act_on_authorization" }

// InsertOpts makes the job unique per action while one is live, on the
// payments queue, retried as charges are (well inside the provider's
// 24-hour key window).
func (ActPaymentArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       outbox.QueuePayments,
		MaxAttempts: outbox.ChargeMaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: outbox.LiveJobStates()},
	}
}
