package stripesim

import (
	"cmp"
	"maps"
)

// The *JSON types below are the Stripe objects as they go on the wire. Only
// the fields stripe-go's structs decode and the worker could look at are
// rendered; unset optional fields are null as at Stripe.

type automaticPaymentMethodsJSON struct {
	AllowRedirects string `json:"allow_redirects,omitempty"`
	Enabled        bool   `json:"enabled"`
}

type nextActionJSON struct {
	Type         string         `json:"type"`
	UseStripeSDK map[string]any `json:"use_stripe_sdk,omitempty"`
}

type processingJSON struct {
	Type string         `json:"type"`
	Card map[string]any `json:"card"`
}

type intentJSON struct {
	ID                      string                       `json:"id"`
	Object                  string                       `json:"object"`
	Amount                  int64                        `json:"amount"`
	AmountCapturable        int64                        `json:"amount_capturable"`
	AmountReceived          int64                        `json:"amount_received"`
	AutomaticPaymentMethods *automaticPaymentMethodsJSON `json:"automatic_payment_methods"`
	CanceledAt              *int64                       `json:"canceled_at"`
	CancellationReason      *string                      `json:"cancellation_reason"`
	CaptureMethod           string                       `json:"capture_method"`
	ClientSecret            string                       `json:"client_secret"`
	ConfirmationMethod      string                       `json:"confirmation_method"`
	Created                 int64                        `json:"created"`
	Currency                string                       `json:"currency"`
	Customer                *string                      `json:"customer"`
	Description             *string                      `json:"description"`
	LastPaymentError        *apiError                    `json:"last_payment_error"`
	LatestCharge            any                          `json:"latest_charge"` // null, an id, or the expanded charge
	Livemode                bool                         `json:"livemode"`
	Metadata                map[string]string            `json:"metadata"`
	NextAction              *nextActionJSON              `json:"next_action"`
	PaymentMethod           any                          `json:"payment_method"` // null, an id, or the expanded payment method
	PaymentMethodTypes      []string                     `json:"payment_method_types"`
	Processing              *processingJSON              `json:"processing"`
	ReceiptEmail            *string                      `json:"receipt_email"`
	Status                  string                       `json:"status"`
}

type cardJSON struct {
	Brand    string `json:"brand"`
	Country  string `json:"country"`
	ExpMonth int64  `json:"exp_month"`
	ExpYear  int64  `json:"exp_year"`
	Funding  string `json:"funding"`
	Last4    string `json:"last4"`
}

// addressJSON is an address; the test payment methods have none, so every
// field is null, as Stripe renders an address nobody filled in.
type addressJSON struct {
	City       *string `json:"city"`
	Country    *string `json:"country"`
	Line1      *string `json:"line1"`
	Line2      *string `json:"line2"`
	PostalCode *string `json:"postal_code"`
	State      *string `json:"state"`
}

// billingDetailsJSON is the billing details of a payment method and of the
// charges made with it.
type billingDetailsJSON struct {
	Address *addressJSON `json:"address"`
	Email   *string      `json:"email"`
	Name    *string      `json:"name"`
	Phone   *string      `json:"phone"`
}

type paymentMethodJSON struct {
	ID             string              `json:"id"`
	Object         string              `json:"object"`
	BillingDetails *billingDetailsJSON `json:"billing_details"`
	Card           *cardJSON           `json:"card"`
	Created        int64               `json:"created"`
	Customer       *string             `json:"customer"`
	Livemode       bool                `json:"livemode"`
	Metadata       map[string]string   `json:"metadata"`
	Type           string              `json:"type"`
}

type outcomeJSON struct {
	NetworkStatus string  `json:"network_status"`
	Reason        *string `json:"reason"`
	RiskLevel     string  `json:"risk_level"`
	SellerMessage string  `json:"seller_message"`
	Type          string  `json:"type"`
}

type paymentMethodDetailsJSON struct {
	Card *cardJSON `json:"card"`
	Type string    `json:"type"`
}

type chargeJSON struct {
	ID                   string                    `json:"id"`
	Object               string                    `json:"object"`
	Amount               int64                     `json:"amount"`
	AmountCaptured       int64                     `json:"amount_captured"`
	AmountRefunded       int64                     `json:"amount_refunded"`
	BalanceTransaction   *string                   `json:"balance_transaction"`
	BillingDetails       *billingDetailsJSON       `json:"billing_details"`
	Captured             bool                      `json:"captured"`
	Created              int64                     `json:"created"`
	Currency             string                    `json:"currency"`
	Customer             *string                   `json:"customer"`
	Description          *string                   `json:"description"`
	Disputed             bool                      `json:"disputed"`
	FailureCode          *string                   `json:"failure_code"`
	FailureMessage       *string                   `json:"failure_message"`
	Livemode             bool                      `json:"livemode"`
	Metadata             map[string]string         `json:"metadata"`
	Outcome              *outcomeJSON              `json:"outcome"`
	Paid                 bool                      `json:"paid"`
	PaymentIntent        any                       `json:"payment_intent"` // an id or the expanded intent
	PaymentMethod        string                    `json:"payment_method"`
	PaymentMethodDetails *paymentMethodDetailsJSON `json:"payment_method_details"`
	Refunded             bool                      `json:"refunded"`
	Status               string                    `json:"status"`
}

type refundJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Charge             any               `json:"charge"` // an id or the expanded charge
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Metadata           map[string]string `json:"metadata"`
	PaymentIntent      any               `json:"payment_intent"` // an id or the expanded intent
	Reason             *string           `json:"reason"`
	ReceiptNumber      *string           `json:"receipt_number"`
	Status             string            `json:"status"`
}

type payoutJSON struct {
	ID                        string            `json:"id"`
	Object                    string            `json:"object"`
	Amount                    int64             `json:"amount"`
	ArrivalDate               int64             `json:"arrival_date"`
	Automatic                 bool              `json:"automatic"`
	BalanceTransaction        *string           `json:"balance_transaction"`
	Created                   int64             `json:"created"`
	Currency                  string            `json:"currency"`
	Description               *string           `json:"description"`
	Destination               *string           `json:"destination"`
	FailureBalanceTransaction *string           `json:"failure_balance_transaction"`
	FailureCode               *string           `json:"failure_code"`
	FailureMessage            *string           `json:"failure_message"`
	Livemode                  bool              `json:"livemode"`
	Metadata                  map[string]string `json:"metadata"`
	Method                    string            `json:"method"`
	OriginalPayout            *string           `json:"original_payout"`
	ReconciliationStatus      string            `json:"reconciliation_status"`
	ReversedBy                *string           `json:"reversed_by"`
	SourceType                string            `json:"source_type"`
	StatementDescriptor       *string           `json:"statement_descriptor"`
	Status                    string            `json:"status"`
	Type                      string            `json:"type"`
}

type listJSON struct {
	Object  string        `json:"object"`
	Data    []*intentJSON `json:"data"`
	HasMore bool          `json:"has_more"`
	URL     string        `json:"url"`
}

type searchResultJSON struct {
	Object     string        `json:"object"`
	Data       []*intentJSON `json:"data"`
	HasMore    bool          `json:"has_more"`
	NextPage   *string       `json:"next_page"`
	TotalCount *int          `json:"total_count,omitempty"`
	URL        string        `json:"url"`
}

// noBillingDetails is what the test payment methods carry: an empty
// address and no name, email or phone.
func noBillingDetails() *billingDetailsJSON {
	return &billingDetailsJSON{Address: &addressJSON{}}
}

func cardDetails(card testCard) *cardJSON {
	return &cardJSON{Brand: card.brand, Country: "US", ExpMonth: 12, ExpYear: 2034, Funding: card.funding, Last4: card.last4}
}

// paymentMethodObject renders a test payment method; the simulator keeps no
// PaymentMethod objects of its own, so created is borrowed from the intent.
func paymentMethodObject(id string, card testCard, created int64) *paymentMethodJSON {
	return &paymentMethodJSON{
		ID: id, Object: "payment_method", BillingDetails: noBillingDetails(), Card: cardDetails(card), Created: created,
		Metadata: map[string]string{}, Type: "card",
	}
}

func metadataJSON(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

func (st *state) intentJSON(in *intent, exp expansion) *intentJSON {
	out := &intentJSON{
		ID:                      in.id,
		Object:                  "payment_intent",
		Amount:                  in.amount,
		AutomaticPaymentMethods: in.automaticMethods,
		CaptureMethod:           cmp.Or(in.captureMethod, captureAutomatic),
		ClientSecret:            in.clientSecret,
		ConfirmationMethod:      "automatic",
		Created:                 in.created,
		Currency:                in.currency,
		Customer:                nullable(in.customer),
		Description:             nullable(in.description),
		LastPaymentError:        in.lastError,
		Metadata:                metadataJSON(in.metadata),
		PaymentMethodTypes:      in.paymentMethodTypes,
		ReceiptEmail:            nullable(in.receiptEmail),
		Status:                  in.status,
	}
	if in.latestCharge != "" {
		out.LatestCharge = in.latestCharge
		if ch, ok := st.charges[in.latestCharge]; ok && exp["latest_charge"] {
			out.LatestCharge = st.chargeJSON(ch, nil)
		}
	}
	if in.paymentMethod != "" {
		out.PaymentMethod = in.paymentMethod
		if card, ok := lookupTestCard(in.paymentMethod); ok && exp["payment_method"] {
			out.PaymentMethod = paymentMethodObject(in.paymentMethod, card, in.created)
		}
	}
	switch in.status {
	case statusSucceeded:
		out.AmountReceived = in.amountReceived
	case statusRequiresCapture:
		out.AmountCapturable = in.amount
	case statusRequiresAction:
		out.NextAction = &nextActionJSON{Type: "use_stripe_sdk", UseStripeSDK: map[string]any{
			"type":             "three_d_secure_redirect",
			"three_d_secure_2": map[string]any{"source": "src_" + in.id[3:]},
		}}
	case statusProcessing:
		out.Processing = &processingJSON{Type: "card", Card: map[string]any{}}
	case statusCanceled:
		out.CanceledAt = &in.canceledAt
		out.CancellationReason = nullable(in.cancellationReason)
	}
	return out
}

// amountCaptured is what a charge captured: all of it, or less after a
// partial capture, whose released rest shows as refunded.
func (st *state) amountCaptured(ch *charge) int64 {
	if ch.status != chargeSucceeded || ch.uncaptured {
		return 0
	}
	if in, ok := st.intents[ch.intentID]; ok && in.amountReceived > 0 {
		return in.amountReceived
	}
	return ch.amount
}

func (st *state) chargeJSON(ch *charge, exp expansion) *chargeJSON {
	out := &chargeJSON{
		ID:                   ch.id,
		Object:               "charge",
		Amount:               ch.amount,
		AmountRefunded:       ch.amountRefunded,
		BillingDetails:       noBillingDetails(),
		Created:              ch.created,
		Currency:             ch.currency,
		Customer:             nullable(ch.customer),
		Description:          nullable(ch.description),
		FailureCode:          nullable(ch.failureCode),
		FailureMessage:       nullable(ch.failureMessage),
		Metadata:             metadataJSON(ch.metadata),
		PaymentIntent:        ch.intentID,
		PaymentMethod:        ch.paymentMethod,
		PaymentMethodDetails: &paymentMethodDetailsJSON{Card: cardDetails(ch.card), Type: "card"},
		Refunded:             ch.amountRefunded == ch.amount,
		Status:               ch.status,
	}
	switch ch.status {
	case chargeSucceeded:
		out.Paid = true
		if !ch.uncaptured {
			out.AmountCaptured = st.amountCaptured(ch)
			out.Captured = true
			out.BalanceTransaction = nullable("txn_" + ch.id[3:])
		}
		out.Outcome = &outcomeJSON{
			NetworkStatus: "approved_by_network", RiskLevel: "normal",
			SellerMessage: "Payment complete.", Type: "authorized",
		}
	case chargeFailed:
		out.Outcome = &outcomeJSON{
			NetworkStatus: "declined_by_network", Reason: nullable(ch.card.declineCode), RiskLevel: "normal",
			SellerMessage: "The bank did not return any further details with this decline.", Type: "issuer_declined",
		}
	}
	if in, ok := st.intents[ch.intentID]; ok && exp["payment_intent"] {
		out.PaymentIntent = st.intentJSON(in, nil)
	}
	return out
}

func (st *state) refundJSON(re *refund, exp expansion) *refundJSON {
	out := &refundJSON{
		ID:                 re.id,
		Object:             "refund",
		Amount:             re.amount,
		BalanceTransaction: nullable("txn_" + re.id[3:]),
		Charge:             re.chargeID,
		Created:            re.created,
		Currency:           re.currency,
		Metadata:           metadataJSON(re.metadata),
		PaymentIntent:      re.intentID,
		Reason:             nullable(re.reason),
		Status:             "succeeded",
	}
	if ch, ok := st.charges[re.chargeID]; ok && exp["charge"] {
		out.Charge = st.chargeJSON(ch, nil)
	}
	if in, ok := st.intents[re.intentID]; ok && exp["payment_intent"] {
		out.PaymentIntent = st.intentJSON(in, nil)
	}
	return out
}

// payoutJSON renders a payout. Its arrival_date is when it is due to be
// paid, by the simulator's clock; Stripe gives the day the bank is
// expected to credit it. A manual payout (automatic false) is not
// reconciled with the balance transactions it pays out, hence
// reconciliation_status not_applicable, as at Stripe.
func (s *Server) payoutJSON(po *payout) *payoutJSON {
	return &payoutJSON{
		ID:                        po.id,
		Object:                    "payout",
		Amount:                    po.amount,
		ArrivalDate:               s.arrivalAt(po).Unix(),
		BalanceTransaction:        nullable("txn_" + po.id[3:]),
		Created:                   po.created,
		Currency:                  po.currency,
		Description:               nullable(po.description),
		Destination:               nullable(bankAccountOf(po.account)),
		FailureBalanceTransaction: nullable(po.reversal),
		FailureCode:               nullable(po.failureCode),
		FailureMessage:            nullable(po.failureMessage),
		Metadata:                  metadataJSON(po.metadata),
		Method:                    "standard",
		ReconciliationStatus:      "not_applicable",
		SourceType:                "card",
		StatementDescriptor:       nullable(po.descriptor),
		Status:                    po.status,
		Type:                      "bank_account",
	}
}
