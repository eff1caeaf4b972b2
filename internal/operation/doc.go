// Package operation is the lifecycle every provider operation shares (a
// charge, a refund, and whatever a clone adds): the machinery that is the
// same whatever the operation does at the provider. An operation kind
// supplies only what is its own: its table and states, how its locks are
// taken, how it is looked up at the provider and how an outcome is
// recorded; the engine runs the rest the same way for every kind:
//
//   - the sweeper hands an operation that no job will finish to
//     reconciliation (the sweeper);
//   - the reconciler settles an operation whose outcome is unknown by
//     looking it up at the provider, never by sending it again, and proves
//     absence only once no request can still be in flight (Reconciler);
//   - each runs as a periodic River job on the maintenance queue
//     (MaintenanceInsertOpts, sweepWorker, reconcileWorker).
package operation
