// Package webhooks receives the payment provider's events and acts on them.
//
// An event is a hint, never the truth: it may arrive late, twice, out of
// order or not at all, and the object it carries was rendered when it was
// created. So:
//
//   - The endpoint (Handler) verifies the Stripe-Signature, stores the event
//     once by its id (INSERT … ON CONFLICT DO NOTHING) and, in the same
//     transaction, inserts the job that processes it; a redelivery is
//     acknowledged and changes nothing. It answers as soon as that commits.
//   - The job (Processor) hands the event to the operation kind that
//     answers its type (operation.Kind.SettleEvent), which reads the
//     event's object again from the provider and settles its operation
//     from that answer, under its locks, as its worker or its reconciler
//     would. A final payment the provider contradicts is left as it is and
//     recorded as a ledger finding for an operator. An event that tells
//     only what its operation records (the kind's EventShortcuts: a
//     payment's succeeded or canceled intent) changes nothing, and is
//     marked so without the read: most events of a healthy service are
//     these.
//   - A periodic job (Recoverer) lists the provider's events after the last
//     one it listed and feeds them through the same store-once path, so a
//     delivery that never came is still acted on.
//
// Nothing here is needed for a payment to settle: the charge worker and the
// reconciler never wait for an event. Events make settlement prompter (a
// payment handed to reconciliation is settled as soon as the provider says
// how it ended) and catch contradictions.
//
// Dispatch is by the kinds' event types (operation.Kind.EventTypes): types
// no kind answers are stored already processed, with result "ignored", and
// acknowledged; they cost no job. This package writes no SQL against any
// kind's table.
package webhooks
