package stripesim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// AdminClient drives a simulator's /_sim/ endpoints from tests in other
// packages.
type AdminClient struct {
	// BaseURL is the simulator's root, e.g. httptest.Server.URL or
	// "http://127.0.0.1:12111". Required.
	BaseURL string
	// HTTPClient sends the requests. Defaults to http.DefaultClient.
	HTTPClient *http.Client
}

// AdminError is an admin request the simulator refused.
type AdminError struct {
	// StatusCode is the HTTP status: 400 for an invalid request, 404 for an
	// unknown object, 409 for an object in the wrong state.
	StatusCode int
	// Message is the simulator's explanation.
	Message string
}

// Error implements error.
func (e *AdminError) Error() string {
	return fmt.Sprintf("stripesim admin: %d: %s", e.StatusCode, e.Message)
}

// InjectFault adds a fault; see Fault for what each field does.
func (c AdminClient) InjectFault(ctx context.Context, f Fault) error {
	return c.do(ctx, http.MethodPost, "/_sim/faults", f, nil)
}

// ClearFaults removes every fault.
func (c AdminClient) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/_sim/faults", nil, nil)
}

// Faults lists the active faults, with Count holding the count remaining.
func (c AdminClient) Faults(ctx context.Context) ([]Fault, error) {
	var out faultList
	err := c.do(ctx, http.MethodGet, "/_sim/faults", nil, &out)
	return out.Faults, err
}

// Ledger returns every object created and the counters of every
// idempotency key.
func (c AdminClient) Ledger(ctx context.Context) (Ledger, error) {
	var l Ledger
	err := c.do(ctx, http.MethodGet, "/_sim/ledger", nil, &l)
	return l, err
}

// Balance returns an account's available balance in a currency ("" for
// the platform's own account), as GET /v1/balance would answer it, but
// read from the ledger: injected faults do not apply to it.
func (c AdminClient) Balance(ctx context.Context, account, currency string) (int64, error) {
	l, err := c.Ledger(ctx)
	if err != nil {
		return 0, err
	}
	return l.Available(account, currency), nil
}

// FundAtLeast funds an account ("" for the platform's own) until its
// available balance in currency is at least amount, and returns the
// balance. Asked again, it adds nothing.
func (c AdminClient) FundAtLeast(ctx context.Context, account, currency string, amount int64) (int64, error) {
	var out LedgerBalance
	err := c.do(ctx, http.MethodPost, "/_sim/balance", fundRequest{Account: account, Currency: currency, AtLeast: amount}, &out)
	return out.Available, err
}

// ResolveIntent finishes a requires_action or processing payment intent
// with status succeeded, requires_payment_method or canceled.
func (c AdminClient) ResolveIntent(ctx context.Context, id, status string) error {
	return c.do(ctx, http.MethodPost, "/_sim/payment_intents/"+url.PathEscape(id)+"/resolve", resolveRequest{Status: status}, nil)
}

// ConfirmAsCustomer confirms an intent of account ("" for the platform's)
// again with paymentMethod, as the customer holding its client secret can
// from their browser until the intent is canceled, and returns the
// intent's status after it. A refused confirmation (a canceled intent, a
// declined card) is an *AdminError with the provider's status and message.
func (c AdminClient) ConfirmAsCustomer(ctx context.Context, account, intentID, paymentMethod string) (string, error) {
	path := "/v1/payment_intents/" + url.PathEscape(intentID) + "/confirm"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.BaseURL, "/")+path,
		strings.NewReader(url.Values{"payment_method": {paymentMethod}}.Encode()))
	if err != nil {
		return "", fmt.Errorf("build POST %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk_test_customer_browser")
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	res, err := cmp.Or(c.HTTPClient, http.DefaultClient).Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", path, err)
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, maxAdminBody)).Decode(&body); err != nil {
		return "", fmt.Errorf("decode POST %s: %w", path, err)
	}
	if res.StatusCode >= 300 {
		return "", fmt.Errorf("POST %s: %w", path, &AdminError{StatusCode: res.StatusCode, Message: body.Error.Message})
	}
	return body.Status, nil
}

// AdvanceClock moves the simulator's clock forward by d: authorizations
// older than seven days by the new clock are canceled, as Stripe cancels
// them.
func (c AdminClient) AdvanceClock(ctx context.Context, d time.Duration) error {
	return c.do(ctx, http.MethodPost, "/_sim/clock", map[string]string{"advance": d.String()}, nil)
}

// Reset forgets every object, idempotency key and fault.
func (c AdminClient) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/_sim/reset", nil, nil)
}

func (c AdminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, body)
	if err != nil {
		return fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := cmp.Or(c.HTTPClient, http.DefaultClient).Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		var e adminErrorJSON
		raw, _ := io.ReadAll(io.LimitReader(res.Body, maxAdminBody))
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return fmt.Errorf("%s %s: %w", method, path, &AdminError{StatusCode: res.StatusCode, Message: e.Error})
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}
