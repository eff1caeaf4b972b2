package stripesim

import (
	"maps"
	"time"
)

// PaymentIntent statuses, as Stripe spells them.
const (
	statusRequiresPaymentMethod = "requires_payment_method"
	statusRequiresConfirmation  = "requires_confirmation"
	statusRequiresAction        = "requires_action"
	statusRequiresCapture       = "requires_capture"
	statusProcessing            = "processing"
	statusSucceeded             = "succeeded"
	statusCanceled              = "canceled"
)

// Charge statuses.
const (
	chargePending   = "pending"
	chargeSucceeded = "succeeded"
	chargeFailed    = "failed"
)

// Capture methods: automatic captures at confirmation; manual authorizes
// then, and captures (or cancels) on a later request.
const (
	captureAutomatic = "automatic"
	captureManual    = "manual"
)

// authorizationValidity is how long an uncaptured authorization lasts: Stripe
// cancels a requires_capture intent after 7 days (cancellation_reason
// automatic), by the simulator's clock here.
const authorizationValidity = 7 * 24 * time.Hour

// cardBehaviour is what confirming with a test payment method does.
type cardBehaviour int

const (
	cardSucceeds cardBehaviour = iota
	cardDeclines
	cardRequiresAction
	cardProcesses
)

// testCard is one of the payment methods the simulator knows.
type testCard struct {
	brand, last4, funding string
	behaviour             cardBehaviour
	declineCode, message  string // for cardDeclines
}

// lookupTestCard returns the test payment method with the given id. Ids
// follow Stripe's test payment methods; pm_sim_processing is the
// simulator's own, since Stripe has no card that stays processing.
func lookupTestCard(id string) (testCard, bool) {
	switch id {
	case "pm_card_visa":
		return testCard{brand: "visa", last4: "4242", funding: "credit", behaviour: cardSucceeds}, true
	case "pm_card_mastercard":
		return testCard{brand: "mastercard", last4: "4444", funding: "credit", behaviour: cardSucceeds}, true
	case "pm_card_chargeDeclined":
		return testCard{
			brand: "visa", last4: "0002", funding: "credit", behaviour: cardDeclines,
			declineCode: "generic_decline", message: "Your card was declined.",
		}, true
	case "pm_card_visa_chargeDeclinedInsufficientFunds":
		return testCard{
			brand: "visa", last4: "9995", funding: "credit", behaviour: cardDeclines,
			declineCode: "insufficient_funds", message: "Your card has insufficient funds.",
		}, true
	case "pm_card_authenticationRequired":
		return testCard{brand: "visa", last4: "3184", funding: "credit", behaviour: cardRequiresAction}, true
	case "pm_sim_processing":
		return testCard{brand: "visa", last4: "0077", funding: "credit", behaviour: cardProcesses}, true
	}
	return testCard{}, false
}

// intent is a PaymentIntent.
type intent struct {
	id, clientSecret     string
	seq                  int64 // creation order, for the ledger and lists
	created              int64
	createdAt            time.Time // created to the nanosecond, for the search delay
	account              string    // the connected account it belongs to; "" the platform's
	idempotencyKey       string
	amount               int64
	currency             string
	customer             string
	description          string
	receiptEmail         string
	paymentMethod        string
	paymentMethodTypes   []string
	automaticMethods     *automaticPaymentMethodsJSON
	metadata             map[string]string
	status               string
	latestCharge         string
	lastError            *apiError
	canceledAt           int64
	cancellationReason   string
	processingRetrievals int // retrievals answered while processing
	captureMethod        string
	authorizedAt         time.Time // when a manual intent reached requires_capture
	amountReceived       int64     // what was captured: the amount, or less after a partial capture
	// captures counts the capture requests that executed, for the ledger:
	// a captured intent answers a second capture with a 400, so more than
	// one would mean a client captured twice.
	captures int
}

// charge is the Charge a confirmation creates.
type charge struct {
	id, intentID   string
	account        string // its intent's
	seq            int64
	created        int64
	idempotencyKey string
	amount         int64
	amountRefunded int64
	currency       string
	customer       string
	description    string
	metadata       map[string]string
	paymentMethod  string
	card           testCard
	status         string
	failureCode    string
	failureMessage string
	// uncaptured is set while the charge is only authorized (a manual
	// intent in requires_capture, or canceled before capture).
	uncaptured bool
}

// refund is a Refund of (part of) a charge.
type refund struct {
	id, chargeID, intentID string
	account                string // its charge's
	seq                    int64
	created                int64
	idempotencyKey         string
	amount                 int64
	currency               string
	metadata               map[string]string
	reason                 string
	// released is set on a refund of a charge not yet captured: it released
	// (part of) the authorization, and took nothing from the balance, which
	// never had the money.
	released bool
}

// Payout statuses, as Stripe spells them: pending until the bank has it,
// in_transit until it arrives, then paid or failed; only a pending payout
// can be canceled.
const (
	payoutPending   = "pending"
	payoutInTransit = "in_transit"
	payoutPaid      = "paid"
	payoutFailed    = "failed"
	payoutCanceled  = "canceled"
)

// payout is a Payout of (part of) an account's available balance to its
// bank account.
type payout struct {
	id             string
	account        string // the connected account whose balance it draws on
	seq            int64
	created        int64
	createdAt      time.Time // created to the nanosecond: the settlement is timed from it
	idempotencyKey string
	amount         int64
	currency       string
	description    string
	metadata       map[string]string
	descriptor     string // statement_descriptor
	status         string
	failureCode    string
	failureMessage string
	// reversal is the balance transaction that gave the amount back to the
	// balance when the payout failed or was canceled.
	reversal string
}

// settled reports whether the payout has reached a final status.
func (po *payout) settled() bool {
	return po.status != payoutPending && po.status != payoutInTransit
}

// balanceKey names one balance of an account: Stripe keeps one per
// currency.
type balanceKey struct {
	account, currency string
}

// state is everything the simulator remembers. Server.mu guards it.
type state struct {
	seq     int64
	intents map[string]*intent
	// authorized are the intents in requires_capture, by id: the only ones
	// an authorization's expiry, checked before every request, can cancel.
	// Scanning every intent instead cost each request time in proportion
	// to all the simulator had ever charged, under its one lock.
	authorized map[string]*intent
	charges    map[string]*charge
	refunds    map[string]*refund
	payouts    map[string]*payout
	// unsettled are the payouts still pending or in transit, by id: the only
	// ones the settlement, run before every request, has to look at.
	unsettled map[string]*payout
	// balances are the available balances, kept up to date at each change
	// (a capture, a refund, a payout made or given back) rather than summed
	// over an account's charges, which would cost a refund or a payout time
	// in proportion to all the account ever charged. A currency an account
	// has used has an entry, zero included.
	balances map[balanceKey]int64
	// funded is what POST /_sim/balance added to each balance: money no
	// charge brought in, as a test-mode top-up adds it at Stripe.
	funded map[balanceKey]int64
	// customers maps a customer id to the account that first used it: at
	// Stripe a customer belongs to one account.
	customers map[string]string
	keys      map[keyScope]*keyEntry
	faults    []*activeFault
	// events in creation order, and by id.
	events     []*event
	eventsByID map[string]*event
	// unsent are events recorded by the executing request, not yet handed
	// to the webhook sender.
	unsent        []*event
	webhookFaults []*activeWebhookFault
}

func newState() *state {
	return &state{
		intents:    map[string]*intent{},
		authorized: map[string]*intent{},
		charges:    map[string]*charge{},
		refunds:    map[string]*refund{},
		payouts:    map[string]*payout{},
		unsettled:  map[string]*payout{},
		balances:   map[balanceKey]int64{},
		funded:     map[balanceKey]int64{},
		customers:  map[string]string{},
		keys:       map[keyScope]*keyEntry{},

		eventsByID: map[string]*event{},
	}
}

func (st *state) nextSeq() int64 {
	st.seq++
	return st.seq
}

// newCharge records a charge for the intent's current payment method.
func (st *state) newCharge(in *intent, card testCard, status string, now time.Time) *charge {
	ch := &charge{
		id:             newID("ch_", 24),
		intentID:       in.id,
		account:        in.account,
		seq:            st.nextSeq(),
		created:        now.Unix(),
		idempotencyKey: in.idempotencyKey,
		amount:         in.amount,
		currency:       in.currency,
		customer:       in.customer,
		description:    in.description,
		// Stripe copies the intent's metadata onto the charge it creates.
		metadata:      maps.Clone(in.metadata),
		paymentMethod: in.paymentMethod,
		card:          card,
		status:        status,
	}
	st.charges[ch.id] = ch
	in.latestCharge = ch.id
	return ch
}

// succeed moves an intent to succeeded, settling its pending charge or
// creating one.
// A manual intent stops at requires_capture, its charge authorized only.
func (st *state) succeed(in *intent, now time.Time) {
	ch, ok := st.charges[in.latestCharge]
	if ok && ch.status == chargePending {
		ch.status = chargeSucceeded
	} else {
		card, _ := lookupTestCard(in.paymentMethod)
		ch = st.newCharge(in, card, chargeSucceeded, now)
	}
	in.lastError = nil
	if in.captureMethod == captureManual {
		ch.uncaptured = true
		in.status = statusRequiresCapture
		in.authorizedAt = now
		st.authorized[in.id] = in
		return
	}
	in.status = statusSucceeded
	in.amountReceived = in.amount
	st.credit(in.account, in.currency, in.amount)
}

// capture captures amount of an authorized intent; the rest of the
// authorization is released, shown as refunded on the charge, as Stripe
// shows it.
func (st *state) capture(in *intent, amount int64) {
	if ch, ok := st.charges[in.latestCharge]; ok {
		ch.uncaptured = false
		ch.amountRefunded += ch.amount - amount
	}
	in.status = statusSucceeded
	in.amountReceived = amount
	in.captures++
	delete(st.authorized, in.id)
	st.credit(in.account, in.currency, amount)
}

// cancel cancels an intent that has not been captured, releasing an
// authorization it holds.
func (st *state) cancel(in *intent, reason string, now time.Time) {
	if ch, ok := st.charges[in.latestCharge]; ok && in.status == statusRequiresCapture {
		ch.amountRefunded = ch.amount
	}
	in.status = statusCanceled
	in.canceledAt = now.Unix()
	in.cancellationReason = reason
	delete(st.authorized, in.id)
}

// fail moves an intent back to requires_payment_method after its payment
// failed, as Stripe does: the error is kept in last_payment_error and the
// payment method is detached so that the client must supply another.
func (st *state) fail(in *intent, card testCard, e *apiError, now time.Time) {
	ch, ok := st.charges[in.latestCharge]
	if !ok || ch.status != chargePending {
		ch = st.newCharge(in, card, chargeFailed, now)
	}
	ch.status = chargeFailed
	ch.failureCode = e.Code
	ch.failureMessage = e.Message
	if e.Type == errTypeCard {
		e.Charge = ch.id
		e.PaymentMethod = paymentMethodObject(in.paymentMethod, card, in.created)
	}
	in.lastError = e.withDocURL()
	in.status = statusRequiresPaymentMethod
	in.paymentMethod = ""
}

// The lookups of one account: an object of another account does not exist
// for it, as at Stripe, where each connected account has its own objects.

func (st *state) intentOf(account, id string) (*intent, bool) {
	in, ok := st.intents[id]
	return in, ok && in.account == account
}

func (st *state) chargeOf(account, id string) (*charge, bool) {
	ch, ok := st.charges[id]
	return ch, ok && ch.account == account
}

func (st *state) refundOf(account, id string) (*refund, bool) {
	re, ok := st.refunds[id]
	return re, ok && re.account == account
}

func (st *state) payoutOf(account, id string) (*payout, bool) {
	po, ok := st.payouts[id]
	return po, ok && po.account == account
}

func (st *state) eventOf(account, id string) (*event, bool) {
	ev, ok := st.eventsByID[id]
	return ev, ok && ev.account == account
}
