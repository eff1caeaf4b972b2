package provider

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// KeyWindow is how long the provider remembers idempotency keys.
const KeyWindow = 24 * time.Hour

// Config configures a Client.
type Config struct {
	// SecretKey authenticates to Stripe (sk_test_… or sk_live_…). Required.
	SecretKey string
	// APIBase points the client at another base URL (the simulator,
	// stripe-mock). Empty means Stripe's real API.
	APIBase string
	// HTTPClient carries the calls. Defaults to a client with no timeout of
	// its own: every call carries its caller's context and deadline.
	HTTPClient *http.Client
}

// Client calls the provider, on the platform's own account or, made by For,
// on one connected account.
type Client struct {
	api     *client.API
	account string
}

// For returns a client whose every call acts on the connected account
// account (the Stripe-Account header), where the objects of other accounts
// do not exist; "" is the platform's own account. A tenant given a connected
// account has every call made for it made this way.
func (c *Client) For(account string) *Client {
	scoped := *c
	scoped.account = account
	return &scoped
}

// scope puts the client's account on a call's parameters.
func (c *Client) scope(params interface{ SetStripeAccount(string) }) {
	if c.account != "" {
		params.SetStripeAccount(c.account)
	}
}

// New returns a Client with stripe-go's own retries turned off.
func New(cfg Config) *Client {
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	// A copy, so the caller's client is not changed: the transport notes
	// which answers the provider replayed from its idempotency store.
	observed := *httpClient
	observed.Transport = replayObserver{next: httpClient.Transport}
	backendCfg := &stripe.BackendConfig{
		MaxNetworkRetries: stripe.Int64(0),
		HTTPClient:        &observed,
		EnableTelemetry:   stripe.Bool(false),
		// Callers log every outcome themselves, with their own ids.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.APIBase != "" {
		backendCfg.URL = stripe.String(cfg.APIBase)
	}
	return &Client{api: client.New(cfg.SecretKey, stripe.NewBackendsWithConfig(backendCfg))}
}

// Transport returns an HTTP transport for up to concurrency calls at once
// to the provider. Go's default keeps two idle connections per host: with
// more calls in flight, every call beyond two would end by closing its
// connection and the next would open (and TLS-handshake) a new one.
func Transport(concurrency int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(concurrency, 2)
	t.MaxIdleConns = max(concurrency, t.MaxIdleConns)
	return t
}

// replayObserver records, for calls whose context carries a *callRecord,
// whether the answer was replayed from the provider's idempotency store.
// stripe-go does not expose response headers on errors, and a replayed 5xx
// is exactly the error whose headers matter.
type replayObserver struct {
	next http.RoundTripper
}

func (o replayObserver) RoundTrip(req *http.Request) (*http.Response, error) {
	next := o.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if rec, ok := req.Context().Value(callRecordKey{}).(*callRecord); ok && resp != nil {
		rec.set(resp.Header.Get("Idempotent-Replayed") == "true")
	}
	return resp, err
}

type callRecordKey struct{}

type callRecord struct {
	mu       sync.Mutex
	replayed bool
}

func (r *callRecord) set(replayed bool) {
	r.mu.Lock()
	r.replayed = replayed
	r.mu.Unlock()
}

func (r *callRecord) get() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replayed
}

func observe(ctx context.Context) (context.Context, *callRecord) {
	rec := &callRecord{}
	return context.WithValue(ctx, callRecordKey{}, rec), rec
}

// Kind is what a provider answer proves.
type Kind int

const (
	// Succeeded: the intent is succeeded: the money moved.
	Succeeded Kind = iota + 1
	// Pending: the intent exists and is processing or waiting for the
	// customer (3-D Secure); read it again later.
	Pending
	// Declined: a card error, or an intent that ended without a charge
	// (canceled, payment method refused). Nothing was charged.
	Declined
	// Rejected: a 4xx proving the provider created nothing (invalid
	// parameters, unknown payment method).
	Rejected
	// KeyConflict: the provider saw the idempotency key with other
	// parameters. Keys are derived per payment and generation, so this is a
	// bug, and the charge's outcome is unknown.
	KeyConflict
	// Ambiguous: nothing is proven (network error, timeout, 5xx, 429, 409
	// key in flight, 401/403). Never read it as "nothing happened".
	Ambiguous
	// Authorized: a manual-capture intent is authorized (requires_capture):
	// the amount is held on the card, not moved, until a capture takes it
	// or a cancel (or the provider, after seven days) releases it.
	Authorized
)

func (k Kind) String() string {
	switch k {
	case Succeeded:
		return "succeeded"
	case Pending:
		return "pending"
	case Declined:
		return "declined"
	case Rejected:
		return "rejected"
	case KeyConflict:
		return "key_conflict"
	case Ambiguous:
		return "ambiguous"
	case Authorized:
		return "authorized"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Outcome is a classified provider answer.
type Outcome struct {
	Kind Kind
	// Intent is the payment intent the answer carried, if any.
	Intent *Intent
	// Code, DeclineCode, Message and Param come from a provider error or the
	// intent's last payment error.
	Code, DeclineCode, Message, Param string
	// HTTPStatus is the provider's status code, 0 when no answer arrived.
	HTTPStatus int
	// Replayed is whether the provider answered from its idempotency store.
	// For an Ambiguous 5xx it means every retry with the same key will get
	// the same error: retrying can never learn more.
	Replayed bool
	// Err is the underlying error, for logs.
	Err error
}

// IntentID is the id of the answer's intent, or "".
func (o Outcome) IntentID() string {
	if o.Intent == nil {
		return ""
	}
	return o.Intent.ID
}

// Ref is what the intent says of itself: its id, and the metadata
// that names its operation.
func (in *Intent) Ref() (id string, metadata map[string]string) { return in.ID, in.Metadata }

// IntentPrefix starts every payment intent's id (pi_…), which the
// provider's paths carry.
const IntentPrefix = "pi"

// Intent is the part of a payment intent oncepay reads.
type Intent struct {
	ID       string
	Status   stripe.PaymentIntentStatus
	Amount   int64
	Currency string
	Metadata map[string]string
	Created  time.Time
	// LastError is the intent's last payment error, if any.
	LastError *IntentError
	// ClientSecret lets the customer's browser complete a next action. It
	// is a credential for this intent: shown to the payment's tenant, never
	// logged.
	ClientSecret string
	// NextAction is what the customer must do, for an intent that
	// requires action.
	NextAction *NextAction
	// CaptureMethod is automatic or manual; AmountCapturable is what an
	// authorization holds (requires_capture), AmountReceived what was
	// captured; CancellationReason says why an intent was canceled
	// (automatic: the provider voided an expired authorization).
	CaptureMethod      string
	AmountCapturable   int64
	AmountReceived     int64
	CancellationReason string
	// ReleasedAuthorization: the intent was canceled after it authorized
	// (its latest charge was paid and never captured), not before: what
	// was held went back to the customer. Read from the latest charge,
	// which RetrieveIntent expands.
	ReleasedAuthorization bool
}

// NextAction is an intent's next_action: its type (use_stripe_sdk for a
// 3-D Secure challenge completed with Stripe.js and the client secret,
// redirect_to_url for a page to send the customer to) and that page.
type NextAction struct {
	Type        string
	RedirectURL string
}

// IntentError is why an intent's last attempt failed.
type IntentError struct {
	Code, DeclineCode, Message string
}

func intentOf(pi *stripe.PaymentIntent) *Intent {
	if pi == nil {
		return nil
	}
	in := &Intent{
		ID: pi.ID, Status: pi.Status, Amount: pi.Amount, Currency: string(pi.Currency),
		Metadata: pi.Metadata, Created: time.Unix(pi.Created, 0).UTC(), ClientSecret: pi.ClientSecret,
		CaptureMethod: string(pi.CaptureMethod), AmountCapturable: pi.AmountCapturable, AmountReceived: pi.AmountReceived,
		CancellationReason: string(pi.CancellationReason),
	}
	if ch := pi.LatestCharge; pi.Status == stripe.PaymentIntentStatusCanceled && ch != nil {
		in.ReleasedAuthorization = ch.Paid && !ch.Captured
	}
	if pi.NextAction != nil {
		in.NextAction = &NextAction{Type: string(pi.NextAction.Type)}
		if pi.NextAction.RedirectToURL != nil {
			in.NextAction.RedirectURL = pi.NextAction.RedirectToURL.URL
		}
	}
	if pi.LastPaymentError != nil {
		in.LastError = &IntentError{
			Code: string(pi.LastPaymentError.Code), DeclineCode: string(pi.LastPaymentError.DeclineCode),
			Message: MessageFor(string(pi.LastPaymentError.Code), string(pi.LastPaymentError.DeclineCode)),
		}
	}
	return in
}

// OutcomeOf says what an intent's state proves.
func OutcomeOf(in *Intent) Outcome {
	out := Outcome{Intent: in}
	switch in.Status {
	case stripe.PaymentIntentStatusSucceeded:
		out.Kind = Succeeded
	case stripe.PaymentIntentStatusRequiresCapture:
		out.Kind = Authorized
	case stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresAction,
		stripe.PaymentIntentStatusRequiresConfirmation:
		out.Kind = Pending
	case stripe.PaymentIntentStatusCanceled:
		if in.ReleasedAuthorization {
			return Released(in)
		}
		fallthrough
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		// The attempt failed (declined, or 3-D Secure abandoned): no charge.
		out.Kind = Declined
		out.Code = string(in.Status)
		if in.LastError != nil {
			out.Code, out.DeclineCode, out.Message = in.LastError.Code, in.LastError.DeclineCode, in.LastError.Message
		}
	default:
		out.Kind = Ambiguous
		out.Err = fmt.Errorf("payment intent %s in unexpected status %q", in.ID, in.Status)
	}
	return out
}

// classify maps a call's result to what it proves. Only answers that prove
// nothing was charged are Declined or Rejected; everything else that is not
// a success is Ambiguous.
func classify(pi *stripe.PaymentIntent, err error, replayed bool) Outcome {
	if err == nil {
		out := OutcomeOf(intentOf(pi))
		out.HTTPStatus, out.Replayed = http.StatusOK, replayed
		return out
	}
	var se *stripe.Error
	if !errors.As(err, &se) {
		return Outcome{Kind: Ambiguous, Err: err}
	}
	out := Outcome{
		Code: string(se.Code), DeclineCode: string(se.DeclineCode), Message: MessageFor(string(se.Code), string(se.DeclineCode)), Param: se.Param,
		HTTPStatus: se.HTTPStatusCode, Replayed: replayed, Err: Redact(err), Intent: intentOf(se.PaymentIntent),
	}
	switch {
	case se.Type == stripe.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusBadRequest:
		out.Kind = KeyConflict
	case se.HTTPStatusCode == http.StatusPaymentRequired || se.Type == stripe.ErrorTypeCard:
		out.Kind = Declined
	case se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound:
		// Invalid parameters, unknown payment method or customer: rejected
		// before anything was created.
		out.Kind = Rejected
	default:
		// 401/403 (our key is wrong: fixable), 409, 429, 5xx.
		out.Kind = Ambiguous
	}
	return out
}

// Charge is the one request that charges a payment. Every attempt must send
// it unchanged: the provider replays the first answer only for the same key
// with the same parameters.
type Charge struct {
	IdempotencyKey string
	Amount         int64
	Currency       string
	PaymentMethod  string
	Customer       string
	Description    string
	Metadata       map[string]string
	// ManualCapture authorizes only: the intent stops at requires_capture
	// (Authorized) until CaptureIntent or CancelAuthorization.
	ManualCapture bool
}

// CreateIntent creates and confirms a payment intent for c, with c's key.
func (c *Client) CreateIntent(ctx context.Context, ch Charge) Outcome {
	ctx, rec := observe(ctx)
	params := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(ch.Amount),
		Currency:      stripe.String(ch.Currency),
		PaymentMethod: stripe.String(ch.PaymentMethod),
		Confirm:       stripe.Bool(true),
		// A server-side charge cannot follow a redirect; cards that would
		// need one end in requires_action, which the caller polls.
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled:        stripe.Bool(true),
			AllowRedirects: stripe.String("never"),
		},
	}
	if ch.Customer != "" {
		params.Customer = stripe.String(ch.Customer)
	}
	if ch.ManualCapture {
		params.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	}
	if ch.Description != "" {
		params.Description = stripe.String(ch.Description)
	}
	for k, v := range ch.Metadata {
		params.AddMetadata(k, v)
	}
	params.SetIdempotencyKey(ch.IdempotencyKey)
	params.Context = ctx
	c.scope(params)
	pi, err := c.api.PaymentIntents.New(params)
	return classify(pi, err, rec.get())
}

// RetrieveIntent reads an intent that exists, with its latest charge (what
// tells a released authorization from a decline). A failed read proves
// nothing about the charge (a 404 or 400 here means a wrong key, mode or
// account), so every error is Ambiguous, never Declined or Rejected.
func (c *Client) RetrieveIntent(ctx context.Context, intentID string) Outcome {
	params := &stripe.PaymentIntentParams{}
	params.AddExpand("latest_charge")
	params.Context = ctx
	c.scope(params)
	pi, err := c.api.PaymentIntents.Get(intentID, params)
	out := classify(pi, err, false)
	if out.Err != nil {
		out.Kind = Ambiguous
	}
	return out
}

// CancelIntent cancels an intent still waiting for the customer, with
// idempotencyKey, so a retried cancel is the same cancel. A canceled intent
// is Declined with code authentication_required: nothing was charged, and
// nothing can be later. Any other answer is Ambiguous (typically the
// customer finished meanwhile and the intent is no longer cancelable: read
// it again).
func (c *Client) CancelIntent(ctx context.Context, intentID, idempotencyKey string) Outcome {
	params := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String(string(stripe.PaymentIntentCancellationReasonAbandoned))}
	params.SetIdempotencyKey(idempotencyKey)
	params.Context = ctx
	c.scope(params)
	pi, err := c.api.PaymentIntents.Cancel(intentID, params)
	if err != nil {
		return Outcome{Kind: Ambiguous, Intent: &Intent{ID: intentID}, Err: Redact(err)}
	}
	if pi.Status != stripe.PaymentIntentStatusCanceled {
		return Outcome{Kind: Ambiguous, Intent: intentOf(pi), Err: fmt.Errorf("cancel left payment intent %s %s", pi.ID, pi.Status)}
	}
	return Abandoned(intentOf(pi))
}

// Abandoned is the answer of an intent canceled while it waited for its
// customer: Declined, with code authentication_required.
func Abandoned(in *Intent) Outcome {
	return Outcome{
		Kind: Declined, Intent: in, HTTPStatus: http.StatusOK,
		Code: "authentication_required", DeclineCode: "authentication_required",
		Message: "The customer did not complete authentication in time; the payment intent was canceled.",
	}
}

// Released is the answer of an intent whose authorization was released
// before capture: Declined, as nothing was charged, with code
// authorization_ and the provider's reason (automatic: it voided an
// authorization seven days old).
func Released(in *Intent) Outcome {
	reason := cmp.Or(in.CancellationReason, "canceled")
	return Outcome{
		Kind: Declined, Intent: in, HTTPStatus: http.StatusOK, Code: "authorization_" + reason,
		Message: "The authorization was released before capture (" + reason + "); nothing was charged.",
	}
}

// CaptureIntent captures amount of an authorized intent (all of it when
// amount is 0; the rest is released), with idempotencyKey, so a retried
// capture is the same capture. Succeeded: captured. Rejected: a 4xx proving
// nothing was captured (the intent is not, or no longer, requires_capture:
// canceled, already captured; or the amount is too large). Anything else is
// Ambiguous, a stored 5xx marked Replayed.
func (c *Client) CaptureIntent(ctx context.Context, intentID string, amount int64, idempotencyKey string) Outcome {
	ctx, rec := observe(ctx)
	params := &stripe.PaymentIntentCaptureParams{}
	if amount > 0 {
		params.AmountToCapture = stripe.Int64(amount)
	}
	params.SetIdempotencyKey(idempotencyKey)
	params.Context = ctx
	c.scope(params)
	pi, err := c.api.PaymentIntents.Capture(intentID, params)
	return settledBy(classify(pi, err, rec.get()), stripe.PaymentIntentStatusSucceeded)
}

// CancelAuthorization voids an authorized intent with idempotencyKey and
// reason (duplicate, fraudulent, requested_by_customer, abandoned; empty:
// none). Succeeded: the intent is canceled, nothing was or will be
// captured. Rejected and Ambiguous as for CaptureIntent.
func (c *Client) CancelAuthorization(ctx context.Context, intentID, reason, idempotencyKey string) Outcome {
	ctx, rec := observe(ctx)
	params := &stripe.PaymentIntentCancelParams{}
	if reason != "" {
		params.CancellationReason = stripe.String(reason)
	}
	params.SetIdempotencyKey(idempotencyKey)
	params.Context = ctx
	c.scope(params)
	pi, err := c.api.PaymentIntents.Cancel(intentID, params)
	return settledBy(classify(pi, err, rec.get()), stripe.PaymentIntentStatusCanceled)
}

// settledBy reads the answer of an operation on an existing intent: the
// intent in the status the operation leads to is Succeeded; a 4xx other
// than a key conflict proves the operation did nothing (Rejected); any
// other intent status, or any other error, proves nothing.
func settledBy(out Outcome, want stripe.PaymentIntentStatus) Outcome {
	switch {
	case out.Err == nil && out.Intent != nil && out.Intent.Status == want:
		out.Kind = Succeeded
	case out.Err == nil:
		out.Kind = Ambiguous
		out.Err = fmt.Errorf("payment intent %s is %s, not %s", out.IntentID(), out.Intent.Status, want)
	case out.Kind == Declined:
		out.Kind = Rejected
	}
	return out
}

// Judgement is what any classified answer proves, whatever its object (an
// intent, a refund, a payout): the one shape the engine's worker reads.
type Judgement struct {
	Kind Kind
	// Replayed with a 5xx HTTPStatus: the provider stored that error under
	// the key and answers every retry with it.
	Replayed   bool
	HTTPStatus int
	// ObjectID is the provider's object, once known; State its status.
	ObjectID, State string
	// Code is the provider's error or failure code, for logs.
	Code string
	Err  error
}

// Judge is what the answer about an intent proves.
func (o Outcome) Judge() Judgement {
	j := Judgement{Kind: o.Kind, Replayed: o.Replayed, HTTPStatus: o.HTTPStatus, ObjectID: o.IntentID(), Code: o.Code, Err: o.Err}
	if o.Intent != nil {
		j.State = string(o.Intent.Status)
	}
	return j
}
