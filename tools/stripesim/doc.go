// Package stripesim is an in-memory Stripe simulator for the worker's tests
// and the local demo.
//
// stripe-mock answers from fixtures and forgets every request, so it cannot
// show that a payment was charged exactly once. This simulator keeps the
// objects it creates, per connected account (Stripe-Account: an object of
// one account does not exist for another), honours Idempotency-Key the way
// Stripe does (the first response is stored per API key, account and key
// and replayed with
// Idempotent-Replayed: true; other parameters under the same key are an
// idempotency_error; a key still executing is a 409), injects faults such as
// "commit the charge, then fail the response", and exposes a ledger that
// tests assert on.
//
// Where Stripe's behaviour is inconvenient for a client, the simulator
// copies it by default, so that tests meet it before production does:
//
//   - A 5xx answered after the endpoint executed (FaultErrorAfter) is stored
//     under the idempotency key and replayed to every retry with that key:
//     retrying cannot reveal that the charge was committed.
//     Config.ReplayCommittedOn5xx restores the older, unfaithful behaviour.
//     A 5xx from an endpoint that began and made nothing (FaultErrorDuring)
//     is stored and replayed the same way: that key can never make the
//     object, only another key can.
//   - A request whose parameters fail validation (unknown, missing,
//     malformed or contradictory parameters: a 400 before the endpoint
//     executes) is not stored, so the corrected request with the same key
//     executes. A 400 found while executing (no such payment method, an
//     intent in the wrong state) is stored and replayed like any result.
//   - A Stripe-Version header that is not spelt like an API version
//     (2023-10-16, 2024-09-30.acacia) is a 400 invalid_request_error. Any
//     well-formed date is accepted, where Stripe accepts only the dates it
//     released a version on.
//   - Search lags: an intent appears in search results only
//     Config.SearchIndexDelay (2s by default) after its creation, measured
//     with Config.Now, as Stripe's search is eventually consistent. A
//     negative delay makes search immediate.
//   - The list endpoint, GET /v1/payment_intents, is consistent: an intent
//     is listed from the moment it is created. It filters on created (=,
//     gt, gte, lt, lte) and customer, pages with limit (1 to 100, default
//     10) and the starting_after and ending_before cursors, newest first.
//     GET /v1/refunds is consistent in the same way, filtered by
//     payment_intent, charge and created, and so is GET /v1/payouts,
//     filtered by created, arrival_date, status and destination.
//   - Balances are simpler than Stripe's: a captured charge is available
//     at once (nothing is ever pending), so that a test can pay out what it
//     just charged. An account's available balance in a currency is its
//     captured charges and what POST /_sim/balance funded it with (a
//     test-mode top-up), less its refunds (a refund of a charge still only
//     authorized releases the hold and takes nothing), less its payouts
//     that did not fail and were not canceled. A payout beyond it is a 400
//     balance_insufficient, as at Stripe; a refund is not refused for it,
//     and takes the balance below zero, as at Stripe (the account owes it
//     and pays nothing out until it is repaid).
//
// The Stripe side speaks Stripe's wire format (form-encoded requests, bearer
// auth, Stripe's JSON objects and error shape; TestSpecFidelity validates
// every kind of response against Stripe's OpenAPI spec, as embedded in
// stripe-mock, with undeclared fields counted as failures), so stripe-go
// talks to it unchanged through a backend whose URL points at the simulator:
//
//	POST /v1/payment_intents
//	GET  /v1/payment_intents?created[gte]=T&created[lte]=T&limit=N&starting_after=ID
//	GET  /v1/payment_intents/{id}
//	POST /v1/payment_intents/{id}/confirm
//	POST /v1/payment_intents/{id}/cancel
//	POST /v1/payment_intents/{id}/capture
//	GET  /v1/payment_intents/search?query=metadata['payment_id']:'X'
//	GET  /v1/charges/{id}
//	POST /v1/refunds
//	GET  /v1/refunds?payment_intent=ID&limit=N&starting_after=ID
//	GET  /v1/refunds/{id}
//	POST /v1/payouts
//	GET  /v1/payouts?status=paid&created[gte]=T&limit=N&starting_after=ID
//	GET  /v1/payouts/{id}
//	POST /v1/payouts/{id}/cancel
//	GET  /v1/balance
//	GET  /v1/events?type=payment_intent.*&created[gte]=T&limit=N&ending_before=ID
//	GET  /v1/events/{id}
//
// An intent created with capture_method=manual stops at requires_capture
// once authorized (amount_capturable set, its charge paid but not
// captured); POST .../capture takes all of it or amount_to_capture (the rest
// released, shown as refunded on the charge), POST .../cancel releases it,
// and an authorization still uncaptured seven days later, by the
// simulator's clock, is canceled with reason automatic, as Stripe does.
//
// A payout (amount, currency, description, metadata, statement_descriptor;
// method standard, as instant is a 400 instant_payouts_unsupported, the
// account's bank account being no debit card) draws on the account's
// available balance and goes to the account's one bank account
// (destination ba_…). It is pending, then in_transit
// Config.PayoutTransitDelay (1s) after its creation, then paid
// Config.PayoutPaidDelay (2s) later, by the simulator's clock (Config.Now
// and POST /_sim/clock), whether or not anyone reads it: each request
// first settles what is due, and a settler does when no request comes,
// until Server.Close. Only a pending payout can be canceled; its amount
// goes back to the balance. A payout whose amount ends in 13 (113, 2013:
// amount % 100 == 13) fails instead of being paid, with failure_code
// account_closed and "The bank account has been closed.", as a payout to
// Stripe's test bank account 000111111116 does, and its amount goes back
// to the balance.
//
// Every change to an intent (created, succeeded, payment_failed, canceled,
// requires_action, processing, amount_capturable_updated), every refund
// (refund.created, charge.refunded) and every payout (payout.created;
// payout.updated at each change of status, followed by payout.paid,
// payout.failed or payout.canceled when the status is final) records an
// event carrying the object as rendered then, the api_version and the
// request that caused it. With Config.WebhookURL
// set, each event is also POSTed there in the background, signed as Stripe
// signs (Stripe-Signature: t=…,v1=HMAC-SHA256 of "t.body" under
// Config.WebhookSecret), and retried with backoff until it is answered 2xx.
// Webhook faults drop an event (it is still listed), duplicate it, deliver
// it after the next one, or delay it. Server.Close stops the deliveries.
// The events of a payout after its creation name no request: the bank
// moved it.
//
// Confirmation outcomes are chosen by the payment method:
//
//	pm_card_visa, pm_card_mastercard                 succeeded
//	pm_card_chargeDeclined                           402 card_declined / generic_decline
//	pm_card_visa_chargeDeclinedInsufficientFunds     402 card_declined / insufficient_funds
//	pm_card_authenticationRequired                   requires_action (402 authentication_required when off_session)
//	pm_sim_processing                                processing, succeeded after Config.ProcessingRetrievals retrievals
//
// The admin side, under /_sim/ and without Stripe auth, takes and answers
// JSON; AdminClient wraps it for tests in other packages:
//
//	POST   /_sim/faults                          inject a Fault
//	GET    /_sim/faults                          list active faults
//	DELETE /_sim/faults                          clear faults
//	POST   /_sim/payment_intents/{id}/resolve    {"status":"succeeded"} finishes a requires_action or processing intent:
//	                                             the customer's 3-D Secure step done (succeeded), failed
//	                                             (requires_payment_method) or abandoned (canceled); emits the event
//	POST   /_sim/webhook_faults                  inject a WebhookFault (drop, duplicate, reorder, delay)
//	GET    /_sim/webhook_faults                  list them
//	DELETE /_sim/webhook_faults                  clear them
//	GET    /_sim/ledger                          the Ledger: objects (payouts too), keys and balances
//	POST   /_sim/clock                           {"advance":"168h"} moves the clock forward (authorizations expire,
//	                                             payouts due move on)
//	POST   /_sim/balance                         {"account":"acct_…","currency":"usd","at_least":100000} funds the
//	                                             account up to that available balance (again: adds nothing)
//	POST   /_sim/reset                           forget every object, key and fault
package stripesim
