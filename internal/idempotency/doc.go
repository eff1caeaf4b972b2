// Package idempotency makes a state-changing HTTP endpoint safe to retry.
//
// A client names each operation with an Idempotency-Key header. The Store
// reserves that key for the caller's tenant together with a fingerprint of
// the validated request, in the same transaction as the endpoint's own
// writes, and stores the response the endpoint produced. A later request
// with the same key and fingerprint replays that response; the same key with
// another fingerprint is rejected; a request that races the one still
// holding the key waits a bounded time and is then told to retry.
//
// A finished key is replayed for Config.Retention. After that it is a
// tombstone: its stored response is no longer replayed, but the row is kept,
// so that a very late retry is refused (Expired) rather than run a second
// time. Store.Reap, run periodically, turns such keys into slim tombstone
// rows (status expired, no response) kept for Config.TombstoneRetention, and
// deletes tombstones past it; only then is the key free for a new operation.
//
// # Lock order
//
// Every path that changes an operation's outcome locks the row of the
// resource the key created first (by updating it, or SELECT ... FOR UPDATE)
// and the key's row second: a worker recording the operation's outcome,
// reconciliation settling it, and Reserve re-acquiring a failed_retryable
// key, which takes the resource lock through Request.LockResource before it
// updates the key. Two paths taking the same two rows in opposite orders
// would deadlock under load. Paths that touch only keys (reservation of a
// new key, the reaper, which skips locked rows) take no resource lock.
//
// # Waiting for an outcome
//
// A request that asks to wait (Prefer: wait) is parked in Store.Await. The
// transaction that moves its key out of processing sends a notification
// (NotifyChannel) that commits with it; a Notifier, one listening
// connection per process, wakes the waiters of that key. A slow fallback
// poll covers lost notifications, and a cap on waiters per process bounds
// what a burst of waiting clients can hold.
//
// The package knows nothing of what an endpoint does. An endpoint plugs in
// with Endpoint: a Decode function that validates the request and an Execute
// function that does its writes inside the transaction the Store opened.
package idempotency
