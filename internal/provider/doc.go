// Package provider is oncepay's only door to the payment provider (Stripe,
// through stripe-go). Every call answers with a typed Outcome instead of a
// raw error, so callers switch on what the answer proves about money, not on
// error strings.
//
// It is also the one place that knows the provider's wire quirks, and
// callers rely on these facts:
//
//   - Retries are ours. stripe-go's own retries are off; callers retry with
//     the same idempotency key, so there is one retry mechanism to reason
//     about.
//   - A stored 5xx is final for its key. Once an endpoint has started
//     executing, Stripe stores its result under the idempotency key for 24
//     hours, 500 errors included, and replays it to every retry with that key
//     (marked Idempotent-Replayed). A charge that committed but answered 500
//     therefore cannot be learned by retrying the key: Outcome.Replayed says
//     so, and only a lookup (Retrieve by id, FindIntents by metadata) can.
//   - Search lags. Search results are eventually consistent (new objects can
//     take about a minute to appear), so "search found nothing" proves
//     nothing. The list endpoint is consistent: FindIntents falls back to
//     listing the creation window, and only a complete scan of a window that
//     has settled proves an intent was never created.
//   - Keys expire. Stripe forgets idempotency keys after KeyWindow; a call
//     after that with the same key could charge again.
package provider
