package refunds

import (
	"strconv"
	"time"

	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/respond"
)

// IDPrefix starts every refund id ("rfd_01J…"): distinct from the
// provider's own refund ids (re_…), which a refund shows as
// provider_refund_id.
const IDPrefix = "rfd"

// Status is a refund's state. The names match the CHECK constraint on
// refunds.status.
type Status string

const (
	// StatusPending: accepted; the refund job has not reached an outcome.
	StatusPending Status = "pending"
	// StatusSucceeded: the provider returned the money. Terminal.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the provider refused or failed the refund; nothing went
	// back. Terminal, except with FailureProviderNotReached: then the
	// client's retry with the same key resumes it.
	StatusFailed Status = "failed"
	// StatusCanceled: the provider canceled the refund; nothing went back.
	// Terminal.
	StatusCanceled Status = "canceled"
	// StatusRequiresReconciliation: whether the provider refunded could not
	// be determined; the reconciler (or an operator) settles it.
	StatusRequiresReconciliation Status = "requires_reconciliation"
)

// liveStatuses are the states whose amount may have gone back, or may
// still: they count against what remains to be refunded.
var liveStatuses = []Status{StatusPending, StatusSucceeded, StatusRequiresReconciliation}

// FailureProviderNotReached is the failure code of a refund proven never
// to have reached the provider, as for payments.
const FailureProviderNotReached = payments.FailureProviderNotReached

// Reasons are the refund reasons the provider accepts.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Metadata oncepay sets on every provider refund: reconciliation finds a
// refund by refund_id among its payment intent's refunds, and tells its
// generations apart by refund_generation.
const (
	MetadataRefundID   = "refund_id"
	MetadataPaymentID  = payments.MetadataPaymentID
	MetadataTenantID   = payments.MetadataTenantID
	MetadataGeneration = "refund_generation"
)

// Refund is a refund as stored and as the API shows it.
type Refund struct {
	ID                     string     `json:"id" db:"id"`
	Object                 string     `json:"object" db:"-"`
	TenantID               string     `json:"-" db:"tenant_id"`
	PaymentID              string     `json:"payment_id" db:"payment_id"`
	IdempotencyKey         string     `json:"-" db:"idempotency_key"`
	Amount                 int64      `json:"amount" db:"amount"`
	Currency               string     `json:"currency" db:"currency"`
	Reason                 *string    `json:"reason" db:"reason"`
	Status                 Status     `json:"status" db:"status"`
	ProviderRefundID       *string    `json:"provider_refund_id" db:"provider_refund_id"`
	FailureCode            *string    `json:"failure_code" db:"failure_code"`
	FailureMessage         *string    `json:"failure_message" db:"failure_message"`
	ProviderIdempotencyKey string     `json:"-" db:"provider_idempotency_key"`
	ProviderKeyGeneration  int        `json:"-" db:"provider_key_generation"`
	FirstProviderAttemptAt *time.Time `json:"-" db:"first_provider_attempt_at"`
	LastProviderAttemptAt  *time.Time `json:"-" db:"last_provider_attempt_at"`
	ReconcileAfter         *time.Time `json:"-" db:"reconcile_after"`
	ReconcileAttempts      int        `json:"-" db:"reconcile_attempts"`
	CreatedAt              time.Time  `json:"created_at" db:"created_at"`
	UpdatedAt              time.Time  `json:"updated_at" db:"updated_at"`
	// ProviderAccount is the payment's: where its intent, and so the
	// refund, is at the provider.
	ProviderAccount *string `json:"-" db:"provider_account"`
}

// Account is the connected account the refund's provider calls act on; ""
// for the platform's own.
func (r Refund) Account() string { return deref(r.ProviderAccount) }

// MarshalJSON fills the constant "object" member.
func (r Refund) MarshalJSON() ([]byte, error) {
	type plain Refund
	r.Object = "refund"
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	return respond.Marshal(plain(r))
}

// requestOf is the one provider request that makes r in its current
// generation; intentID is its payment's intent.
func requestOf(r Refund, intentID string) provider.RefundRequest {
	return provider.RefundRequest{
		IdempotencyKey:  r.ProviderIdempotencyKey,
		PaymentIntentID: intentID,
		Amount:          r.Amount,
		Reason:          deref(r.Reason),
		Metadata: map[string]string{
			MetadataRefundID:   r.ID,
			MetadataPaymentID:  r.PaymentID,
			MetadataTenantID:   r.TenantID,
			MetadataGeneration: strconv.Itoa(r.ProviderKeyGeneration),
		},
	}
}

// belongsTo reports whether a provider refund was made for r's current
// generation.
func belongsTo(re *provider.Refund, r Refund) bool {
	return re.Metadata[MetadataRefundID] == r.ID && re.Metadata[MetadataGeneration] == strconv.Itoa(r.ProviderKeyGeneration)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// OperatorView is a refund as an operator sees it: what the API shows, and
// the key and provider bookkeeping it hides.
type OperatorView struct {
	Refund
	TenantID          string     `json:"tenant_id"`
	IdempotencyKey    string     `json:"idempotency_key"`
	Generation        int        `json:"generation"`
	FirstAttemptAt    *time.Time `json:"first_attempt_at"`
	LastAttemptAt     *time.Time `json:"last_attempt_at"`
	ReconcileAfter    *time.Time `json:"reconcile_after"`
	ReconcileAttempts int        `json:"reconcile_attempts"`
}

func operatorView(r Refund) OperatorView {
	return OperatorView{Refund: r, TenantID: r.TenantID, IdempotencyKey: r.IdempotencyKey, Generation: r.ProviderKeyGeneration,
		FirstAttemptAt: r.FirstProviderAttemptAt, LastAttemptAt: r.LastProviderAttemptAt, ReconcileAfter: r.ReconcileAfter,
		ReconcileAttempts: r.ReconcileAttempts}
}
