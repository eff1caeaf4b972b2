// Package payments owns payments: their table, the validation of a new
// payment, the HTTP handlers, and the composition of one transaction that
// reserves the idempotency key, writes the payment and inserts the job that
// will charge it.
package payments
