// Package refunds gives back (part of) a succeeded payment: the refunds
// table, POST /v1/payments/{id}/refunds as an idempotency.Endpoint, the
// refund worker, and the refunds' reconciler and sweeper.
//
// # Never more than was charged
//
// A refund is accepted only inside the transaction that holds the payment's
// row lock (SELECT … FOR UPDATE), after summing the payment's refunds that
// are pending, succeeded or being reconciled: every refund is inserted
// under that lock, so two requests, on one API process or several, can never
// both see room for the same money. Failed, canceled and provably
// never-sent refunds do not count. payments.amount_refunded (succeeded
// refunds only) carries a CHECK against the payment's amount as the
// database's last word.
//
// # Lock order
//
// As for payments: every transaction that changes a refund's outcome (the
// worker recording, the reconciler, the sweeper, Settle, the API resuming a
// refund) locks the payment row first, then the refund row, then the
// refund's idempotency key. The API's create path is the one exception in
// appearance only: Store.Run inserts the new key before Execute locks the
// payment, but that key is new and uncommitted, so no other transaction can
// hold or wait for it except a request with the same key, which holds
// nothing else. A re-acquired key (a refund proven never sent) is different:
// its row exists, so LockRefundPayment, the Endpoint's LockResource hook,
// locks the payment before Reserve updates the key.
//
// # Lifecycle
//
//	pending ─┬─> succeeded | failed | canceled                      (the refund worker)
//	         └─> requires_reconciliation ─┬─> succeeded | failed | canceled   (found at the provider)
//	                                      ├─> failed, provider_not_reached ─> pending (client retry, next generation)
//	                                      └─> stays, reconcile_after NULL: an operator's turn
//
// A refund counts against its payment while pending, succeeded or being
// reconciled; payments.amount_refunded counts succeeded refunds only.
package refunds
