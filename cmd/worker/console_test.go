package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// get fetches a console page from a worker's admin listener.
func (w *workerProcess) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + w.out.field("worker started", "admin_addr") + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestConsole: the worker's admin listener serves the console. A payment
// charged by the worker, its webhook delivered, shows in the list (and
// filters keep or drop it), and its page has the timeline: the key, the
// provider call with its key, the provider's outcome and the webhook. An
// open finding is listed, and the alerts page says the findings rule holds.
func TestConsole(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewPool(t)
	p := newPipelineOn(t, pool, dbURL, true)
	w := p.startWorker()

	paid := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	paymentID := paid.PaymentID()
	pay := p.payment(paymentID)

	status, list := w.get(t, "/console/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, list, `href="/console/payments/`+paymentID+`"`)
	for query, listed := range map[string]bool{
		"status=succeeded": true, "status=failed": false, "since=1h": true,
		"tenant=" + url.QueryEscape(p.api.Tenant.TenantID): true,
	} {
		_, page := w.get(t, "/console/?"+query)
		assert.Equal(t, listed, regexp.MustCompile(paymentID).MatchString(page), "filter %s", query)
	}
	status, page := w.get(t, "/console/?status=nonsense")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, `status &#34;nonsense&#34; is not a payment state`)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, page := w.get(t, "/console/payments/"+paymentID)
		assert.Equal(c, http.StatusOK, status)
		assert.Contains(c, page, "Key reserved")
		assert.Contains(c, page, "Provider call: charge sent")
		assert.Contains(c, page, pay.ProviderIdempotencyKey)
		assert.Contains(c, page, "Provider outcome recorded: succeeded")
		assert.Contains(c, page, *pay.ProviderPaymentIntentID)
		assert.Contains(c, page, "Webhook payment_intent.succeeded received")
		assert.Contains(c, page, "processed: ")
	}, 20*time.Second, 100*time.Millisecond, "the timeline lacks the key, the provider call or the webhook")
	// The payment's jobs link into River's UI, served beside the console.
	_, page = w.get(t, "/console/payments/"+paymentID)
	job := regexp.MustCompile(`href="/riverui/jobs/(\d+)"`).FindStringSubmatch(page)
	require.NotNil(t, job, "no link into River's UI:\n%s", page)
	status, ui := w.get(t, "/riverui/jobs/"+job[1])
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, ui, "<html")
	status, api := w.get(t, "/riverui/api/jobs/"+job[1])
	require.Equal(t, http.StatusOK, status, api)
	require.Contains(t, api, `"kind":"charge_payment"`)
	require.Contains(t, api, paymentID)

	status, _ = w.get(t, "/console/payments/pay_nosuchpayment")
	require.Equal(t, http.StatusNotFound, status)

	// Every kind's operations are listed and shown from the registry.
	status, list = w.get(t, "/console/operations?kind=payment&status=succeeded")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, list, `href="/console/operations/`+paymentID+`"`)
	status, page = w.get(t, "/console/operations/"+paymentID)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Key reserved")
	require.Contains(t, page, "(charge_payment) attempt 1 started")
	require.Contains(t, page, "Now succeeded")
	status, page = w.get(t, "/console/operations?kind=transfer")
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, page, "payout")
	status, _ = w.get(t, "/console/operations/pyo_01JD3W9ZC6M7X4Q2V8N5R0T1YB")
	require.Equal(t, http.StatusNotFound, status)

	_, findings := w.get(t, "/console/findings")
	require.Contains(t, findings, "No open finding")
	_, err := ledger.Record(p.ctx, p.pool, ledger.KindMissingIntent, paymentID, "pi_gone", map[string]any{"reason": "test"})
	require.NoError(t, err)
	_, findings = w.get(t, "/console/findings")
	require.Contains(t, findings, ledger.KindMissingIntent)
	require.Contains(t, findings, `href="/console/payments/`+paymentID+`"`)
	_, alerts := w.get(t, "/console/alerts")
	require.Regexp(t, `(?s)OncepayLedgerFindings</td>.*?<strong>holds</strong>: 1`, alerts)
	require.Regexp(t, `(?s)OncepayDatabaseUnreadable</td>.*?clear`, alerts)
	// A rule over rates names its runbook too.
	require.Regexp(t, `(?s)OncepayProviderFailing</td>.*?docs/operations.md#the-provider-is-failing`, alerts)

	status, _ = w.get(t, "/console/nowhere")
	require.Equal(t, http.StatusNotFound, status)
}
