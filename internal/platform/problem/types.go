package problem

import "net/http"

// The catalogue. Slugs are part of the API: never rename one.
var (
	MissingIdempotencyKey = Type{"missing-idempotency-key", "Idempotency-Key header required", http.StatusBadRequest,
		"Every POST that changes state needs an Idempotency-Key header. Generate a fresh high-entropy key (a UUID v4 is ideal) " +
			"for each new operation, and send the same key again when you retry that operation."}
	InvalidIdempotencyKey = Type{"invalid-idempotency-key", "Idempotency-Key header is malformed", http.StatusBadRequest,
		"The key must be 16 to 255 characters from A-Z, a-z, 0-9 and - _ . : = (UUIDs, ULIDs and base64url fit), sent either bare " +
			"(Idempotency-Key: 5f0c...) or as a structured-field string (Idempotency-Key: \"5f0c...\"), once per request."}
	IdempotencyKeyMismatch = Type{"idempotency-key-mismatch", "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity,
		"This key was first used with a different request (another body, method or path). A key names one operation: nothing was " +
			"done for this request. Use a new key for a new operation; to retry the original, resend it unchanged."}
	IdempotencyKeyInUse = Type{"idempotency-key-in-use", "A request with this Idempotency-Key is still being processed", http.StatusConflict,
		"Another request with the same key has not finished yet. Wait for the number of seconds in Retry-After and send the same " +
			"request again: it will then be answered with the original outcome."}
	IdempotencyOutcomeUnknown = Type{"idempotency-outcome-unknown", "The outcome of this operation is being reconciled", http.StatusConflict,
		"The operation reached the payment provider but its outcome could not be confirmed. It is being reconciled with the provider; " +
			"do not create a new operation. Retry with the same key after Retry-After to get the final outcome; meanwhile " +
			"resource_id names what the request created, and the Location header where to read it."}
	IdempotencyKeyExpired = Type{"idempotency-key-expired", "This Idempotency-Key expired long ago", http.StatusUnprocessableEntity,
		"The key was used for an operation whose stored response has passed its retention period. The key is remembered (as a " +
			"tombstone) so that a very late retry can never run the operation a second time; nothing was done for this request. " +
			"The resource_id member names what the original request created: read it to learn its outcome. For a new operation, use a new key."}
	IdempotencyRetryNeeded = Type{"idempotency-retry-needed", "The operation did not take effect; retry it", http.StatusServiceUnavailable,
		"The operation started with this key provably never reached the payment provider, so nothing was charged. Send the same " +
			"request with the same Idempotency-Key after Retry-After: it will run again, and still at most once."}
	InvalidRequest = Type{"invalid-request", "The request is invalid", http.StatusBadRequest,
		"One or more fields are missing or invalid; the errors member lists each field and what is wrong with it. " +
			"Nothing was stored and the Idempotency-Key was not used: fix the request and send it again with the same key."}
	RequestTooLarge = Type{"request-too-large", "The request body is too large", http.StatusRequestEntityTooLarge,
		"Request bodies are limited to 16 KiB."}
	UnsupportedMediaType = Type{"unsupported-media-type", "The request body must be JSON", http.StatusUnsupportedMediaType,
		"Send the body as application/json."}
	UnsupportedContentEncoding = Type{"unsupported-content-encoding", "The request body must not be compressed", http.StatusUnsupportedMediaType,
		"Request bodies are accepted only as they are: without a Content-Encoding header, or with Content-Encoding: identity. " +
			"The Accept-Encoding response header says so. Send the JSON body uncompressed; nothing was done with this request."}
	Unauthorized = Type{"unauthorized", "Missing or invalid API key", http.StatusUnauthorized,
		"Authenticate with Authorization: Bearer <api key>. Keys are created with `api tenants create` and shown only once."}
	NotFound = Type{"not-found", "Not found", http.StatusNotFound,
		"There is no such resource for your account."}
	MethodNotAllowed = Type{"method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed,
		"This path does not support the request's method; the Allow header lists the ones it does."}
	CardDeclined = Type{"card-declined", "The card was declined", http.StatusPaymentRequired,
		"The payment provider declined the card; decline_code says why (for example insufficient_funds). The payment is failed " +
			"and will not be retried. To try again, create a new payment with a new Idempotency-Key, typically with another payment method."}
	ProviderRejected = Type{"provider-rejected", "The payment provider rejected the payment", http.StatusBadRequest,
		"The provider refused the request without charging anything (for example an unknown payment method); provider_code says why. " +
			"The payment is failed. Fix the request and create a new payment with a new Idempotency-Key."}
	CustomerForbidden = Type{"customer-forbidden", "The customer belongs to another account", http.StatusForbidden,
		"The customer was first used by another tenant of this service: a customer is one account's, and another's payments " +
			"cannot charge it. Nothing was sent to the provider, nothing was stored and the Idempotency-Key was not used. Use a " +
			"customer of your own."}
	PaymentNotRefundable = Type{"payment-not-refundable", "The payment cannot be refunded", http.StatusConflict,
		"Only a succeeded payment can be refunded; payment_status names the payment's state. A payment still processing, requiring action " +
			"or being reconciled may succeed later: nothing was stored under the Idempotency-Key, so the same request with the same key " +
			"works once it has. A failed payment charged nothing, so there is nothing to refund."}
	RefundExceedsRemaining = Type{"refund-exceeds-remaining", "The refund exceeds what remains to be refunded", http.StatusConflict,
		"The amount asked for is more than the payment's amount less its refunds that succeeded, are pending or are being reconciled; " +
			"remaining names what can still be refunded. Nothing was stored under the Idempotency-Key: if a pending refund fails, the " +
			"same request with the same key may succeed later; when refunds still in flight hold what is missing, in_flight says how " +
			"much and Retry-After when to ask again. Ask for at most remaining (or leave amount out to refund all of it)."}
	RefundFailed = Type{"refund-failed", "The refund failed", http.StatusUnprocessableEntity,
		"The payment provider did not return the money (for example the card was closed, or the provider refused the request); " +
			"failure_code says why. The refund is failed and its amount counts as refundable again. To try again, create a new " +
			"refund with a new Idempotency-Key."}
	PayoutsNeedAccount = Type{"payouts-need-account", "Payouts need a connected account", http.StatusForbidden,
		"A payout pays out the tenant's own balance, which only a connected account holds: the platform's balance is not the " +
			"tenant's. An operator gives a tenant its account (api tenants set-account). Nothing was stored under the " +
			"Idempotency-Key: once the tenant has an account, the same request with the same key works."}
	PayoutFailed = Type{"payout-failed", "The payout failed", http.StatusUnprocessableEntity,
		"The payment provider did not pay the money out (the balance was too low, or the bank refused it); failure_code says " +
			"why, and whatever left the balance is back in it. To try again, create a new payout with a new Idempotency-Key."}
	PayoutNotCancelable = Type{"payout-not-cancelable", "The payout cannot be canceled", http.StatusConflict,
		"Only a payout still pending at the provider can be canceled; payout_status names the payout's state. A payout in " +
			"transit or paid is at the bank already, and one failed or canceled has nothing left to cancel."}
	PaymentNotCapturable = Type{"payment-not-capturable", "The payment cannot be captured", http.StatusConflict,
		"Only a payment created with capture_method manual and now requires_capture can be captured, once; payment_status names " +
			"the payment's state. A capture or a cancel of it already in flight, a payment captured or canceled (by you, or by the " +
			"provider once an authorization is seven days old) or an automatic payment cannot be. Nothing was sent to the provider."}
	PaymentNotCancelable = Type{"payment-not-cancelable", "The authorization cannot be canceled", http.StatusConflict,
		"Only a payment created with capture_method manual and now requires_capture can be canceled (its authorization released); " +
			"payment_status names the payment's state. A capture or a cancel of it already in flight, a captured or canceled payment or " +
			"an automatic payment cannot be. Nothing was sent to the provider."}
	PaymentBusy = Type{"payment-busy", "Another operation on this payment is being recorded", http.StatusConflict,
		"The payment was locked by another operation for longer than the request could wait. Nothing was done and nothing was " +
			"stored: send the same request with the same Idempotency-Key after Retry-After."}
	RateLimited = Type{"rate-limited", "Too many new operations", http.StatusTooManyRequests,
		"Your account started more new operations (requests with a new Idempotency-Key) than its limit allows; nothing was done " +
			"and the key was not used. Send the same request, with the same key, after Retry-After. Retries of keys already used " +
			"never count against the limit, so a retry is always answered."}
	AuthenticationLocked = Type{"authentication-locked", "Too many failed authentications", http.StatusTooManyRequests,
		"Requests from your address presented an API key that is not valid (wrong, revoked or ended by a rotation) too often " +
			"within a short window, so every request from it is refused until Retry-After, a valid key's too: the key was not " +
			"looked at and nothing was done. Find the client still sending the bad key and give it the current one; then send " +
			"the request again, with the same Idempotency-Key, after Retry-After."}
	TooManyPending = Type{"too-many-pending", "Too many operations in flight", http.StatusTooManyRequests,
		"Your account has as many operations still processing as it may have at once; nothing was done and the key was not used. " +
			"Wait for some to finish (retry them, or read them, to learn their outcome), then send this request again with the same key " +
			"after Retry-After."}
	ServiceUnavailable = Type{"service-unavailable", "Service temporarily unavailable", http.StatusServiceUnavailable,
		"A dependency (usually the database) is unreachable, or the connection to it was lost during the request. Retry after " +
			"Retry-After. For a POST, send the same request with the same Idempotency-Key: if it was not processed it runs now, and " +
			"if it was (the database committed but its acknowledgement was lost) its result is replayed. Either way it happens once."}
	Internal = Type{"internal-error", "Internal server error", http.StatusInternalServerError,
		"Something unexpected went wrong and has been logged. Server errors are never stored against an Idempotency-Key: " +
			"retrying a POST with the same key is safe and runs it again."}
)

// Catalog lists every problem type, in the order the documentation shows them.
func Catalog() []Type {
	return []Type{
		MissingIdempotencyKey, InvalidIdempotencyKey, IdempotencyKeyMismatch, IdempotencyKeyInUse, IdempotencyOutcomeUnknown,
		IdempotencyKeyExpired, IdempotencyRetryNeeded,
		InvalidRequest, RequestTooLarge, UnsupportedMediaType, UnsupportedContentEncoding, Unauthorized, NotFound, MethodNotAllowed,
		CardDeclined, ProviderRejected, CustomerForbidden, PaymentNotRefundable, RefundExceedsRemaining, RefundFailed, PaymentNotCapturable,
		PaymentNotCancelable, PaymentBusy, PayoutsNeedAccount, PayoutFailed, PayoutNotCancelable,
		RateLimited, AuthenticationLocked, TooManyPending, ServiceUnavailable, Internal,
	}
}

// Lookup finds a type by slug.
func Lookup(slug string) (Type, bool) {
	for _, t := range Catalog() {
		if t.Slug == slug {
			return t, true
		}
	}
	return Type{}, false
}
