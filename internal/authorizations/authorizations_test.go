package authorizations_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/authorizations"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/testkit/workertest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is the pipeline in one process: the API, the charge worker and
// the capture and cancel worker (and reconciler) against the simulator.
type bundle struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	api      *apitest.Server
	sim      stripesim.AdminClient
	provider *provider.Client
	client   *outbox.Client
}

func setup(t *testing.T, deferWorker bool) *bundle {
	t.Helper()
	pool, _ := pgtest.NewPool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger, MaxHold: 5 * time.Second}))
	t.Cleanup(sim.Close)
	b := &bundle{t: t, ctx: context.Background(), pool: pool, api: apitest.Start(t, pool),
		sim: stripesim.AdminClient{BaseURL: sim.URL}, provider: provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL})}
	cfg := operation.WorkerConfig{JobTimeout: 2 * time.Second, PollInterval: 50 * time.Millisecond, RecordTimeout: time.Second}
	keys := b.api.Keys
	workers := river.NewWorkers()
	river.AddWorker(workers, payments.NewChargeWorker(pool, keys, b.provider, logger, cfg))
	env := operation.Env{Pool: pool, Keys: keys, Provider: b.provider, Logger: logger, Worker: cfg,
		Reconcile: operation.ReconcileConfig{Settle: 100 * time.Millisecond,
			RetryBase: 100 * time.Millisecond, RetryMax: 500 * time.Millisecond, RunBudget: 5 * time.Second}}
	periodic := workertest.Start(t, workers, env, 200*time.Millisecond, authorizations.CaptureKind(), authorizations.CancelKind())
	client, err := outbox.NewWorkerClient(pool, outbox.WorkerConfig{
		Workers: workers, JobTimeout: cfg.WithDefaults().MaxAttemptDuration(), RescueStuckJobsAfter: time.Minute,
		Retry: outbox.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}, Logger: logger,
		PeriodicJobs: periodic,
	})
	require.NoError(t, err)
	b.client = client
	if !deferWorker {
		b.start()
	}
	return b
}

func (b *bundle) start() {
	require.NoError(b.t, b.client.Start(b.ctx))
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.client.StopAndCancel(ctx)
	})
}

// authorized creates a manual payment of 20.00 USD and waits for its
// authorization.
func (b *bundle) authorized() payments.Payment {
	b.t.Helper()
	res := b.api.Post(b.t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`, "Prefer", "wait=10")
	require.Equal(b.t, http.StatusCreated, res.Status, res.Raw)
	require.Equal(b.t, "requires_capture", res.Body["status"])
	return b.payment(res.PaymentID())
}

func (b *bundle) payment(paymentID string) payments.Payment {
	b.t.Helper()
	p, err := payments.GetPayment(b.ctx, b.pool, b.api.Tenant.TenantID, paymentID)
	require.NoError(b.t, err)
	return p
}

func (b *bundle) waitPayment(paymentID string, status payments.Status) payments.Payment {
	b.t.Helper()
	var p payments.Payment
	require.EventuallyWithT(b.t, func(c *assert.CollectT) {
		var err error
		p, err = payments.GetPayment(b.ctx, b.pool, b.api.Tenant.TenantID, paymentID)
		assert.NoError(c, err)
		assert.Equal(c, status, p.Status)
	}, 30*time.Second, 20*time.Millisecond, "payment %s never became %s", paymentID, status)
	return p
}

func (b *bundle) intent(p payments.Payment) stripesim.LedgerObject {
	b.t.Helper()
	l, err := b.sim.Ledger(b.ctx)
	require.NoError(b.t, err)
	o, ok := l.Object(*p.ProviderPaymentIntentID)
	require.True(b.t, ok)
	return o
}

// TestCapture: a capture of all or part of the authorization is 202, then
// 200 with the payment succeeded and amount_captured; its key replays
// that, another body under it is 422; the provider captured once; a refund
// gives back at most what was captured.
func TestCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	for _, tc := range []struct {
		body     string
		captured int64
	}{{`{}`, 2000}, {`{"amount_to_capture": 1500}`, 1500}} {
		p := b.authorized()
		key := id.New("key")
		accepted := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, tc.body)
		require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
		require.Equal(t, "/v1/payments/"+p.ID, accepted.Header.Get("Location"))
		captured := b.waitPayment(p.ID, payments.StatusSucceeded)
		require.Equal(t, tc.captured, captured.AmountCaptured)
		require.Zero(t, captured.AmountCapturable)

		replay := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, tc.body)
		require.Equal(t, http.StatusOK, replay.Status, replay.Raw)
		require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
		require.Equal(t, "succeeded", replay.Body["status"])
		require.EqualValues(t, tc.captured, replay.Body["amount_captured"])
		other := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, `{"amount_to_capture": 1}`)
		require.Equal(t, http.StatusUnprocessableEntity, other.Status, other.Raw)
		require.Equal(t, 1, b.intent(p).Captures, "one capture at the provider")

		again := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", id.New("key"), `{}`)
		require.Equal(t, http.StatusConflict, again.Status, again.Raw)
		require.Equal(t, "/docs/problems/payment-not-capturable", again.Body["type"])

		tooMuch := b.api.Refund(t, p.ID, id.New("key"), `{"amount": 2000}`)
		if tc.captured < 2000 {
			require.Equal(t, http.StatusConflict, tooMuch.Status, tooMuch.Raw)
			require.Equal(t, "/docs/problems/refund-exceeds-remaining", tooMuch.Body["type"])
			require.EqualValues(t, tc.captured, tooMuch.Body["remaining"])
		} else {
			require.Equal(t, http.StatusAccepted, tooMuch.Status, tooMuch.Raw)
		}
	}
}

// TestCaptureNamesItsOperation: a capture's answer names the capture
// (Operation-Id, cap_…, the id api operations show and api reconcile
// take), and its key replays the answer as it was stored: the same id and
// the same body; an answer stored without the id (before oncepay sent it)
// is replayed as it was, still without it.
func TestCaptureNamesItsOperation(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.start()
	p := b.authorized()
	require.NoError(t, b.client.Stop(b.ctx)) // the capture waits, its 202 stored under its key
	key := id.New("key")
	path := "/v1/payments/" + p.ID + "/capture"
	accepted := b.api.Post(t, path, key, `{}`)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	captureID := accepted.Header.Get(authorizations.OperationIDHeader)
	require.True(t, id.Valid("cap", captureID), captureID)
	var paymentID string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payment_id FROM payment_actions WHERE id = $1`, captureID).Scan(&paymentID))
	require.Equal(t, p.ID, paymentID)

	replay := b.api.Post(t, path, key, `{}`)
	require.Equal(t, "true", replay.Header.Get(idempotency.ReplayedHeader))
	require.Equal(t, accepted.Status, replay.Status)
	require.Equal(t, accepted.Raw, replay.Raw)
	require.Equal(t, captureID, replay.Header.Get(authorizations.OperationIDHeader))

	_, err := b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET response_headers = response_headers - $3
		WHERE tenant_id = $1 AND idempotency_key = $2`, b.api.Tenant.TenantID, key, authorizations.OperationIDHeader)
	require.NoError(t, err)
	stored := b.api.Post(t, path, key, `{}`)
	require.Equal(t, accepted.Status, stored.Status)
	require.Equal(t, accepted.Raw, stored.Raw)
	require.Empty(t, stored.Header.Values(authorizations.OperationIDHeader), "an answer stored without the id keeps its shape")

	require.NoError(t, b.client.Start(b.ctx))
	b.waitPayment(p.ID, payments.StatusSucceeded)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		final := b.api.Post(t, path, key, `{}`)
		assert.Equal(c, http.StatusOK, final.Status, final.Raw)
		assert.Equal(c, captureID, final.Header.Get(authorizations.OperationIDHeader), "the final answer, stored now, names it")
	}, 10*time.Second, 20*time.Millisecond)
}

// TestCancel: a cancel releases the authorization: 202, then 200 with the
// payment canceled; a capture after it is refused and nothing is sent.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	p := b.authorized()
	key := id.New("key")
	accepted := b.api.Post(t, "/v1/payments/"+p.ID+"/cancel", key, `{"cancellation_reason": "requested_by_customer"}`)
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	canceled := b.waitPayment(p.ID, payments.StatusCanceled)
	require.Equal(t, "authorization_requested_by_customer", *canceled.FailureCode)
	replay := b.api.Post(t, "/v1/payments/"+p.ID+"/cancel", key, `{"cancellation_reason": "requested_by_customer"}`)
	require.Equal(t, http.StatusOK, replay.Status, replay.Raw)
	require.Equal(t, "canceled", replay.Body["status"])
	require.Equal(t, "canceled", b.intent(p).Status)

	capture := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, capture.Status, capture.Raw)
	require.Equal(t, "canceled", capture.Body["payment_status"])
	require.Zero(t, b.intent(p).Captures)
}

// TestRefusals: an automatic payment, an amount beyond the authorization
// and a bad reason are refused before anything is written or sent.
func TestRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	auto := b.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, auto.Status, auto.Raw)
	res := b.api.Post(t, "/v1/payments/"+auto.PaymentID()+"/capture", id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, res.Status, res.Raw)
	require.Equal(t, "/docs/problems/payment-not-capturable", res.Body["type"])
	res = b.api.Post(t, "/v1/payments/"+auto.PaymentID()+"/cancel", id.New("key"), `{}`)
	require.Equal(t, http.StatusConflict, res.Status, res.Raw)
	require.Equal(t, "/docs/problems/payment-not-cancelable", res.Body["type"])

	p := b.authorized()
	res = b.api.Post(t, "/v1/payments/"+p.ID+"/capture", id.New("key"), `{"amount_to_capture": 2001}`)
	require.Equal(t, http.StatusBadRequest, res.Status, res.Raw)
	require.Contains(t, res.Raw, "amount_to_capture")
	res = b.api.Post(t, "/v1/payments/"+p.ID+"/cancel", id.New("key"), `{"cancellation_reason": "bored"}`)
	require.Equal(t, http.StatusBadRequest, res.Status, res.Raw)
	require.Contains(t, res.Raw, "cancellation_reason")
	res = b.api.Post(t, "/v1/payments/pay_01M00000000000000000000000/capture", id.New("key"), `{}`)
	require.Equal(t, http.StatusNotFound, res.Status, res.Raw)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM payment_actions`).Scan(&n))
	require.Zero(t, n, "nothing was written")
	require.Equal(t, "requires_capture", b.intent(p).Status)
}

// TestCaptureAndCancelRace: captures and cancels of one payment, with
// different keys, at once: exactly one of them wins, every other request
// gets its problem, and the provider saw one action.
func TestCaptureAndCancelRace(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	p := b.authorized()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted []string
	)
	for i := range 10 {
		wg.Go(func() {
			path := "/v1/payments/" + p.ID + "/capture"
			if i%2 == 1 {
				path = "/v1/payments/" + p.ID + "/cancel"
			}
			res := b.api.Post(t, path, id.New("key"), `{}`)
			switch res.Status {
			case http.StatusAccepted:
				mu.Lock()
				accepted = append(accepted, path)
				mu.Unlock()
			case http.StatusConflict:
			default:
				t.Errorf("%s: %d %s", path, res.Status, res.Raw)
			}
		})
	}
	wg.Wait()
	require.Len(t, accepted, 1, "one action accepted")
	final := b.waitPayment(p.ID, map[bool]payments.Status{true: payments.StatusSucceeded, false: payments.StatusCanceled}[accepted[0][len(accepted[0])-7:] == "capture"])
	o := b.intent(final)
	if final.Status == payments.StatusSucceeded {
		require.Equal(t, 1, o.Captures)
	} else {
		require.Zero(t, o.Captures)
		require.Equal(t, "canceled", o.Status)
	}
}

// TestCaptureAfterStoredServerError: the provider captures, then answers
// 500 and stores it; the retry gets the 500 replayed, the action goes to
// the reconciler, which reads the intent and records the capture: one
// capture at the provider, the key answering 200.
func TestCaptureAfterStoredServerError(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	p := b.authorized()
	require.NoError(t, b.sim.InjectFault(b.ctx, stripesim.Fault{Mode: stripesim.FaultErrorAfter, Status: 500, Count: 1,
		Path: "POST /v1/payment_intents/" + *p.ProviderPaymentIntentID + "/capture"}))
	key := id.New("key")
	require.Equal(t, http.StatusAccepted, b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, `{}`).Status)
	captured := b.waitPayment(p.ID, payments.StatusSucceeded)
	require.EqualValues(t, 2000, captured.AmountCaptured)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, `{}`)
		assert.Equal(c, http.StatusOK, res.Status, res.Raw)
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, b.intent(p).Captures, "one capture at the provider")
	var status string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM payment_actions WHERE payment_id = $1`, p.ID).Scan(&status))
	require.Equal(t, "succeeded", status)
}

// TestCaptureNeverSentIsResumed: a capture the reconciler proves never
// reached the provider fails provider_not_reached; the client's retry with
// the same key sends it under the next generation, and it captures once.
func TestCaptureNeverSentIsResumed(t *testing.T) {
	t.Parallel()
	b := setup(t, true)
	b.start()
	p := b.authorized()
	require.NoError(t, b.client.Stop(b.ctx))
	key := id.New("key")
	require.Equal(t, http.StatusAccepted, b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, `{}`).Status)
	// The job is lost before it ran: the action goes to reconciliation,
	// with no attempt ever started.
	_, err := b.pool.Exec(b.ctx, `DELETE FROM river_job WHERE kind = 'act_on_authorization'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE payment_actions SET status = 'requires_reconciliation', reconcile_after = now()`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE idempotency_keys SET status = 'unknown' WHERE idempotency_key = $1`, key)
	require.NoError(t, err)
	env := operation.Env{Pool: b.pool, Keys: b.api.Keys, Provider: b.provider, Logger: slog.New(slog.DiscardHandler)}
	cancels := authorizations.CancelKind().Operator(env)
	res, err := cancels.Run(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res.NotReached, "the cancels' reconciler leaves a capture alone")
	captures := authorizations.CaptureKind().Operator(env)
	res, err = captures.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.NotReached)

	retry := b.api.Post(t, "/v1/payments/"+p.ID+"/capture", key, `{}`)
	require.Equal(t, http.StatusAccepted, retry.Status, retry.Raw)
	var generation int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT provider_key_generation FROM payment_actions WHERE payment_id = $1`, p.ID).Scan(&generation))
	require.Equal(t, 2, generation)
	require.NoError(t, b.client.Start(b.ctx))
	b.waitPayment(p.ID, payments.StatusSucceeded)
	require.Equal(t, 1, b.intent(p).Captures, "captured once, under the second generation")
}

// TestExpiredAuthorizationIsNoticed: the provider voids an authorization
// seven days old and its event is lost; the Expirer reads the intent of
// every payment still requires_capture past the lifetime and makes it
// canceled. A younger authorization is not even read.
func TestExpiredAuthorizationIsNoticed(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	old := b.authorized()
	young := b.authorized()
	_, err := b.pool.Exec(b.ctx, `UPDATE payments SET updated_at = now() - interval '8 days' WHERE id = $1`, old.ID)
	require.NoError(t, err)
	expirer := payments.NewExpirer(b.pool, b.api.Keys, b.provider, slog.New(slog.DiscardHandler))

	res, err := expirer.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, payments.ExpireResult{Looked: 1}, res, "still held at the provider: nothing to record")
	require.Equal(t, payments.StatusRequiresCapture, b.payment(old.ID).Status)

	require.NoError(t, b.sim.AdvanceClock(b.ctx, 7*24*time.Hour))
	res, err = expirer.Run(b.ctx)
	require.NoError(t, err)
	require.Equal(t, payments.ExpireResult{Looked: 1, Settled: 1}, res)
	expired := b.payment(old.ID)
	require.Equal(t, payments.StatusCanceled, expired.Status)
	require.Equal(t, "authorization_automatic", *expired.FailureCode)
	require.Equal(t, payments.StatusRequiresCapture, b.payment(young.ID).Status, "not looked at: its authorization is young in our books")
}

// TestLedgerCheckComparesWhatWasCaptured: the ledger check finds a
// payment whose amount_captured is not what the provider received.
func TestLedgerCheckComparesWhatWasCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	p := b.authorized()
	require.Equal(t, http.StatusAccepted, b.api.Post(t, "/v1/payments/"+p.ID+"/capture", id.New("key"), `{"amount_to_capture": 1200}`).Status)
	b.waitPayment(p.ID, payments.StatusSucceeded)
	checker := payments.NewLedgerChecker(b.pool, b.provider, slog.New(slog.DiscardHandler), operation.LedgerCheckConfig{})
	res, err := checker.Check(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, res.Disagreements, "the books agree")

	_, err = b.pool.Exec(b.ctx, `UPDATE payments SET amount_captured = 2000 WHERE id = $1`, p.ID)
	require.NoError(t, err)
	res, err = checker.Check(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Len(t, res.Disagreements, 1)
	require.Equal(t, "amount_mismatch", res.Disagreements[0].Kind)
}
