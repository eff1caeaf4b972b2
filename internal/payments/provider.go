package payments

import (
	"strconv"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// Metadata oncepay sets on every payment intent. Ours win over a client's
// metadata of the same name: reconciliation finds a payment's intents by
// payment_id and tells its generations apart by payment_generation.
const (
	MetadataPaymentID  = "payment_id"
	MetadataTenantID   = "tenant_id"
	MetadataGeneration = "payment_generation"
)

// chargeOf is the one request that charges p in its current generation.
func chargeOf(p Payment) provider.Charge {
	metadata := make(map[string]string, len(p.Metadata)+3)
	for k, v := range p.Metadata {
		metadata[k] = v
	}
	metadata[MetadataPaymentID] = p.ID
	metadata[MetadataTenantID] = p.TenantID
	metadata[MetadataGeneration] = strconv.Itoa(p.ProviderKeyGeneration)
	if p.Ref != nil {
		metadata[operation.MetadataRef] = *p.Ref
	}
	return provider.Charge{
		IdempotencyKey: p.ProviderIdempotencyKey,
		Amount:         p.Amount,
		Currency:       p.Currency,
		PaymentMethod:  p.PaymentMethod,
		Customer:       deref(p.Customer),
		Description:    deref(p.Description),
		Metadata:       metadata,
		ManualCapture:  p.CaptureMethod == CaptureManual,
	}
}

// cancelKey is the idempotency key of the cancel of p's intent: derived
// from the charge's, so a retried cancel is the same cancel.
func cancelKey(p Payment) string { return p.ProviderIdempotencyKey + "-cancel" }

// intentCancelCalls is the cancel of a declined payment's intent, which
// the worker sends before it records the failure (unless the provider had
// closed the intent), as the payment's timeline shows it; none for any
// other payment. Its time is not kept apart: it is dated by the failure's.
func (p Payment) intentCancelCalls() []operation.Call {
	if p.Status != StatusFailed || p.FinalizedAt == nil || p.ProviderPaymentIntentID == nil {
		return nil
	}
	return []operation.Call{{What: "cancel of the declined intent", Key: cancelKey(p), FirstAt: p.FinalizedAt, LastAt: p.FinalizedAt,
		Detail: "intent " + *p.ProviderPaymentIntentID + " canceled, unless the provider had: it can take no money"}}
}
