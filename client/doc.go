// Package client calls the oncepay API and retries what is safe to retry.
//
// Every call that creates something carries an Idempotency-Key: a random
// UUIDv4, or the key given with WithIdempotencyKey. The key names the
// operation, not the HTTP request, so every retry of one call sends the same
// key, and the API answers a retry of a request it already processed with
// the stored answer instead of charging again. To retry an operation later
// (after a crash, from another process), store the key before calling and
// pass it again: Result.IdempotencyKey reports the one used.
//
// # What is retried
//
// A call is retried, with the same key, when its answer says that it did not
// happen yet or that asking again is safe:
//
//   - a transport error: the connection refused or reset, the answer cut
//     off, one attempt timing out (WithAttemptTimeout). The request may have
//     been processed; the key makes the retry return that result. A server
//     certificate the client does not trust is not retried;
//   - 409 idempotency-key-in-use (a request with the key is still running),
//     409 idempotency-outcome-unknown (its outcome is being reconciled) and
//     409 payment-busy (the payment a refund is asked of is being recorded);
//   - 429 and 503 (including idempotency-retry-needed);
//   - 500, 502 and 504. The API never stores a server error under a key, so
//     the retry runs the request again if it did not commit and replays it
//     if it did. A 502 or 504 from a proxy in front of the API says nothing
//     about whether the request arrived; the key makes that question moot.
//
// Nothing else is retried: every other 4xx (400 invalid, 401, 402 declined,
// 404, 415, 422 key reused with another request or expired) is the final
// answer to that request, and sending it again cannot change it. After a 400
// nothing was stored under the key: send the corrected request with the same
// key (WithIdempotencyKey(res.IdempotencyKey)).
//
// # How long it waits
//
// The n-th retry (from 0) waits a random duration in [0, min(max, base·2ⁿ)]
// ("full jitter", WithBackoff), so clients that failed together do not
// retry together. A Retry-After header (delta-seconds or an HTTP date) is a
// floor: the wait is never shorter than the server asked. Retries stop after
// WithMaxAttempts attempts, and when the context ends: a call whose context
// is cancelled returns at once, and a call whose context's deadline comes
// before the next retry could be sent returns without waiting for it. Either
// way the error wraps the context's error and the last answer.
//
// # Answers
//
// A successful call returns the resource and a Result saying which key was
// used, how many attempts it took, whether the answer was a replay of a
// stored one (Idempotent-Replayed) and which preference the server applied
// (Preference-Applied, for WithWait). An error answer is a *ProblemError
// carrying the RFC 9457 problem document: errors.As(err, &pe) reads it, and
// a declined card (IsDeclined) names the failed payment in pe.PaymentID.
package client
