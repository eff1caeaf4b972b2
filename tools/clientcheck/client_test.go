package clientcheck_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/client"
)

func TestLostAnswerIsReplayedUnderTheSameKey(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	b := setup(t, client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	b.net.inject(dropAnswer)

	p, res, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	require.True(t, res.Replayed, "the second attempt must be answered from the key")
	require.Equal(t, []string{res.IdempotencyKey, res.IdempotencyKey}, b.net.sent())
	require.Equal(t, []int{http.StatusAccepted, http.StatusAccepted}, b.net.reached(), "both attempts reached the server")
	require.Equal(t, []string{p.ID}, b.paymentsWithKey(res.IdempotencyKey), "one payment, the one returned")
	require.Equal(t, client.PaymentProcessing, p.Status)
	require.Equal(t, int64(2000), p.Amount)
	require.Equal(t, map[string]string{"order_id": "A-17"}, p.Metadata)

	require.Contains(t, logs.String(), "idempotency_key="+res.IdempotencyKey, "the retry is logged")
	require.Contains(t, logs.String(), "connection reset by peer")
	require.NotContains(t, logs.String(), b.api.Tenant.APIKey, "never the API key")
}

func TestRetryAfterIsTheFloorOfTheWait(t *testing.T) {
	t.Parallel()
	b := setup(t, client.WithMaxAttempts(5))
	at := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	b.net.inject(answer(http.StatusServiceUnavailable, "2"), answer(http.StatusTooManyRequests, at), answer(http.StatusServiceUnavailable, ""))

	p, res, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	require.Equal(t, 4, res.Attempts)
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	require.False(t, res.Replayed)
	require.Equal(t, []int{http.StatusAccepted}, b.net.reached(), "only the last attempt reached the server")
	require.Equal(t, []string{p.ID}, b.paymentsWithKey(res.IdempotencyKey))

	// The injected jitter is zero, so each wait is exactly the floor.
	waits := b.waits.recorded()
	require.Len(t, waits, 3)
	require.Equal(t, 2*time.Second, waits[0], "delta-seconds")
	// An HTTP date has whole seconds: 3s from now, truncated.
	require.GreaterOrEqual(t, waits[1], 1*time.Second, "HTTP date")
	require.LessOrEqual(t, waits[1], 3*time.Second, "HTTP date")
	require.Zero(t, waits[2], "no Retry-After, no jitter")
}

func TestJitterIsDrawnUnderTheExponentialCap(t *testing.T) {
	t.Parallel()
	var limits []time.Duration
	b := setup(t, client.WithMaxAttempts(6), client.WithBackoff(100*time.Millisecond, time.Second),
		client.WithJitter(func(limit time.Duration) time.Duration {
			limits = append(limits, limit)
			return limit
		}))
	for range 5 {
		b.net.inject(answer(http.StatusBadGateway, ""))
	}

	_, res, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	require.Equal(t, 6, res.Attempts)
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
	require.Equal(t, want, limits)
	require.Equal(t, want, b.waits.recorded())
}

func TestKeyInUseIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "held-key-client-test-0001"
	// Play a first request whose transaction is still open: the API waits
	// for it (IDEMPOTENCY_LOCK_WAIT), then answers 409 with Retry-After.
	holder, err := b.api.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer holder.Rollback(b.ctx) //nolint:errcheck // released below; a no-op then
	_, err = holder.Exec(b.ctx, `INSERT INTO idempotency_keys
		(tenant_id, idempotency_key, request_method, request_path, request_fingerprint, status, expires_at)
		VALUES ($1, $2, 'POST', '/v1/payments', decode(repeat('00', 32), 'hex'), 'processing', now() + interval '1 day')`,
		b.api.Tenant.TenantID, key)
	require.NoError(t, err)
	b.waits.then = func(int) { require.NoError(t, holder.Rollback(b.ctx)) } // the first request gives up

	p, res, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithIdempotencyKey(key))
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, key, res.IdempotencyKey)
	require.Equal(t, []int{http.StatusConflict, http.StatusAccepted}, b.net.reached())
	require.Equal(t, []time.Duration{time.Second}, b.waits.recorded(), "the 409's Retry-After")
	require.Equal(t, []string{p.ID}, b.paymentsWithKey(key))
}

func TestFinalAnswersAreNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("MismatchIs422", func(t *testing.T) {
		const key = "mismatch-client-test-0001"
		_, _, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithIdempotencyKey(key))
		require.NoError(t, err)
		before := len(b.net.reached())
		_, res, err := b.client.CreatePayment(b.ctx, visa(2500), client.WithIdempotencyKey(key))
		requireProblem(t, err, http.StatusUnprocessableEntity, client.ProblemIdempotencyKeyMismatch)
		require.Equal(t, 1, res.Attempts)
		require.Len(t, b.net.reached(), before+1)
	})
	t.Run("InvalidIs400", func(t *testing.T) {
		before := len(b.net.reached())
		_, res, err := b.client.CreatePayment(b.ctx, client.PaymentParams{Amount: 0, Currency: "USD", PaymentMethod: "pm_card_visa"})
		pe := requireProblem(t, err, http.StatusBadRequest, client.ProblemInvalidRequest)
		require.Equal(t, 1, res.Attempts)
		require.Len(t, b.net.reached(), before+1)
		fields := map[string]bool{}
		for _, f := range pe.Errors {
			fields[f.Field] = f.Detail != ""
		}
		require.Equal(t, map[string]bool{"amount": true, "currency": true}, fields)

		// Nothing was stored under the key: the corrected request runs.
		p, res, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithIdempotencyKey(res.IdempotencyKey))
		require.NoError(t, err)
		require.False(t, res.Replayed)
		require.Equal(t, []string{p.ID}, b.paymentsWithKey(res.IdempotencyKey))
	})
	t.Run("BadAPIKeyIs401", func(t *testing.T) {
		before := len(b.net.reached())
		c := client.New(b.api.URL, "opk_nope", client.WithHTTPClient(&http.Client{Transport: b.net}), client.WithSleep(b.waits.sleep))
		_, res, err := c.CreatePayment(b.ctx, visa(2000))
		requireProblem(t, err, http.StatusUnauthorized, client.ProblemUnauthorized)
		require.Equal(t, 1, res.Attempts)
		require.Len(t, b.net.reached(), before+1)
	})
	t.Run("UnknownPaymentIs404", func(t *testing.T) {
		before := len(b.net.reached())
		_, res, err := b.client.GetPayment(b.ctx, "pay_0000000000000000000000")
		requireProblem(t, err, http.StatusNotFound, client.ProblemNotFound)
		require.Equal(t, 1, res.Attempts)
		require.Len(t, b.net.reached(), before+1)
	})
	require.Empty(t, b.waits.recorded())
}

func TestMaxAttemptsBoundTheRetries(t *testing.T) {
	t.Parallel()
	api := setup(t)
	for name, f := range map[string]fault{
		"Refused": refuse,
		"Reset":   dropAnswer,
		"Hang":    hang,
		"429":     answer(http.StatusTooManyRequests, ""),
		"500":     answer(http.StatusInternalServerError, ""),
		"502":     answer(http.StatusBadGateway, ""),
		"503":     answer(http.StatusServiceUnavailable, ""),
		"504":     answer(http.StatusGatewayTimeout, ""),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := api.fork(t, client.WithAttemptTimeout(50*time.Millisecond))
			b.net.inject(f, f, f, f)
			_, res, err := b.client.CreatePayment(b.ctx, visa(2000))
			require.ErrorContains(t, err, "gave up after 3 attempts")
			require.Equal(t, 3, res.Attempts)
			require.Len(t, b.net.sent(), 3)
			require.Len(t, b.waits.recorded(), 2)
			if name == "Refused" {
				require.ErrorIs(t, err, syscall.ECONNREFUSED, "the last answer is wrapped")
			}
		})
	}
}

func TestContextEndsTheRetries(t *testing.T) {
	t.Parallel()
	api := setup(t)

	t.Run("CancelledDuringTheWait", func(t *testing.T) {
		t.Parallel()
		b := api.fork(t)
		// The real timer: the client must stop sleeping when the context ends.
		b.client = client.New(b.api.URL, b.api.Tenant.APIKey, client.WithHTTPClient(&http.Client{Transport: b.net}))
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		b.net.inject(func(req *http.Request, forward func(*http.Request) (*http.Response, error)) (*http.Response, error) {
			time.AfterFunc(50*time.Millisecond, cancel)
			return answer(http.StatusServiceUnavailable, "60")(req, forward)
		})
		start := time.Now()
		_, res, err := b.client.CreatePayment(ctx, visa(2000))
		require.Less(t, time.Since(start), 5*time.Second, "returned long after the cancel")
		require.ErrorIs(t, err, context.Canceled)
		requireProblem(t, err, http.StatusServiceUnavailable, "") // the last answer
		require.Equal(t, 1, res.Attempts)
		require.NotEmpty(t, res.IdempotencyKey, "the key to retry with later")
	})
	t.Run("CancelledDuringAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := api.fork(t)
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		b.net.inject(func(req *http.Request, forward func(*http.Request) (*http.Response, error)) (*http.Response, error) {
			time.AfterFunc(50*time.Millisecond, cancel)
			return hang(req, forward)
		})
		_, res, err := b.client.CreatePayment(ctx, visa(2000))
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, res.Attempts)
		require.Empty(t, b.waits.recorded())
	})
	t.Run("DeadlineBeforeTheNextAttempt", func(t *testing.T) {
		t.Parallel()
		b := api.fork(t)
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		b.net.inject(answer(http.StatusServiceUnavailable, "60"))
		_, res, err := b.client.CreatePayment(ctx, visa(2000))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		requireProblem(t, err, http.StatusServiceUnavailable, "")
		require.Equal(t, 1, res.Attempts)
		require.Empty(t, b.waits.recorded(), "no point waiting past the deadline")
		require.NoError(t, ctx.Err(), "returned before the deadline")
	})
	t.Run("AttemptTimeoutIsRetried", func(t *testing.T) {
		t.Parallel()
		// Long enough for a real request on a loaded machine.
		b := api.fork(t, client.WithAttemptTimeout(time.Second))
		b.net.inject(hang)
		p, res, err := b.client.CreatePayment(b.ctx, visa(2000))
		require.NoError(t, err)
		require.Equal(t, 2, res.Attempts)
		require.Equal(t, []string{p.ID}, b.paymentsWithKey(res.IdempotencyKey))
	})
}

func TestConcurrentCallsWithOneKeyCreateOnePayment(t *testing.T) {
	t.Parallel()
	b := setup(t, client.WithMaxAttempts(10))
	const key = "concurrent-client-test-0001"
	const callers = 20
	type outcome struct {
		id       string
		replayed bool
		err      error
	}
	outcomes := make(chan outcome, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			p, res, err := b.client.CreatePayment(b.ctx, visa(2000), client.WithIdempotencyKey(key))
			o := outcome{replayed: res.Replayed, err: err}
			if p != nil {
				o.id = p.ID
			}
			outcomes <- o
		})
	}
	wg.Wait()
	close(outcomes)
	ids := map[string]int{}
	fresh := 0
	for o := range outcomes {
		require.NoError(t, o.err)
		ids[o.id]++
		if !o.replayed {
			fresh++
		}
	}
	statuses := map[int]int{}
	for _, s := range b.net.reached() {
		statuses[s]++
	}
	t.Logf("%d callers; answers by status: %v", callers, statuses)
	require.Len(t, ids, 1, "every caller got the same payment")
	require.Equal(t, 1, fresh, "one caller created it, the others got it replayed")
	for id := range ids {
		require.Equal(t, []string{id}, b.paymentsWithKey(key))
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

	p1, r1, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	p2, r2, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)
	require.Regexp(t, uuid4, r1.IdempotencyKey)
	require.Regexp(t, uuid4, r2.IdempotencyKey)
	require.NotEqual(t, r1.IdempotencyKey, r2.IdempotencyKey, "a new operation, a new key")
	require.NotEqual(t, p1.ID, p2.ID)
	require.False(t, r1.Replayed)
	require.False(t, r2.Replayed)

	sent := len(b.net.sent())
	_, _, err = b.client.CreatePayment(b.ctx, visa(2000), client.WithIdempotencyKey(""))
	require.ErrorContains(t, err, "empty idempotency key")
	require.Len(t, b.net.sent(), sent, "nothing sent")
}

func TestReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, _, err := b.client.CreatePayment(b.ctx, visa(1000))
	require.NoError(t, err)
	second, _, err := b.client.CreatePayment(b.ctx, visa(2000))
	require.NoError(t, err)

	b.net.inject(refuse)
	got, res, err := b.client.GetPayment(b.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, first.ID, got.ID)
	require.Equal(t, 2, res.Attempts, "a read is retried too")
	require.Empty(t, res.IdempotencyKey)
	sent := b.net.sent()
	require.Equal(t, []string{"", ""}, sent[len(sent)-2:], "reads carry no key")

	page, _, err := b.client.ListPayments(b.ctx, client.ListParams{Limit: 1})
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, []string{second.ID}, ids(page.Data))
	page, _, err = b.client.ListPayments(b.ctx, client.ListParams{Limit: 1, StartingAfter: second.ID})
	require.NoError(t, err)
	require.False(t, page.HasMore)
	require.Equal(t, []string{first.ID}, ids(page.Data))

	_, _, err = b.client.GetPayment(b.ctx, "")
	require.ErrorContains(t, err, "empty payment id")
}

func ids(ps []client.Payment) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}
