package refunds_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/refunds"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
)

// TestConcurrentRefundsNeverExceedThePayment sends twenty refunds of 300
// for one payment of 2000 at once, each with its own key: exactly six fit,
// the other fourteen are refused, whether the requests go to one API
// instance or are split across two with pools of their own.
func TestConcurrentRefundsNeverExceedThePayment(t *testing.T) {
	t.Parallel()
	for name, instances := range map[string]int{"OneInstance": 1, "TwoInstances": 2} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			p := b.succeededPayment(2000)
			servers := []*apitest.Server{b.api}
			if instances == 2 {
				pool, err := pgxpool.New(context.Background(), b.url)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				servers = append(servers, apitest.StartAs(t, pool, b.api.Tenant))
			}

			const n, amount = 20, 300
			answers := make([]apitest.Response, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					key := id.New("key")
					srv := servers[i%len(servers)]
					for {
						answers[i] = srv.Refund(t, p.ID, key, `{"amount": 300}`)
						// A payment held longer than the lock wait is
						// answered payment-busy: retry with the same key.
						if answers[i].Body["type"] != problem.PaymentBusy.URI() {
							return
						}
					}
				}()
			}
			began := time.Now()
			close(start)
			wg.Wait()
			t.Logf("%d concurrent refund requests answered in %s", n, time.Since(began).Round(time.Millisecond))

			var accepted []string
			for i, a := range answers {
				switch a.Status {
				case http.StatusAccepted:
					accepted = append(accepted, a.Body["id"].(string))
				case http.StatusConflict:
					require.Equal(t, problem.RefundExceedsRemaining.URI(), a.Body["type"], "answer %d: %s", i, a.Raw)
				default:
					t.Fatalf("answer %d: %d %s", i, a.Status, a.Raw)
				}
			}
			require.Len(t, accepted, 2000/amount, "as many refunds as fit, no more")
			for _, refundID := range accepted {
				b.waitRefund(refundID, refunds.StatusSucceeded)
			}
			var total int64
			for _, o := range b.providerRefunds(p) {
				total += o.Amount
			}
			require.EqualValues(t, len(accepted)*amount, total, "what the provider refunded")
			require.EqualValues(t, len(accepted)*amount, b.payment(p.ID).AmountRefunded)
			require.Len(t, b.providerRefunds(p), len(accepted))
		})
	}
}

// TestConcurrentSameKeyMakesOneRefund sends one key and body twenty times
// at once: one refund, one job, and every answer the same 202 or a 409
// idempotency-key-in-use with Retry-After.
func TestConcurrentSameKeyMakesOneRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, options{deferWorker: true})
	p := b.succeededPayment(2000)
	key := id.New("key")
	const n = 20
	answers := make([]apitest.Response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i] = b.api.Refund(t, p.ID, key, `{"amount": 700}`)
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	for i, a := range answers {
		switch a.Status {
		case http.StatusAccepted:
			ids[a.Body["id"].(string)] = true
		case http.StatusConflict:
			require.Equal(t, problem.IdempotencyKeyInUse.URI(), a.Body["type"], "answer %d: %s", i, a.Raw)
			require.NotEmpty(t, a.Header.Get("Retry-After"))
		default:
			t.Fatalf("answer %d: %d %s", i, a.Status, a.Raw)
		}
	}
	require.Len(t, ids, 1, "every 202 names one refund")
	var rows, jobs int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM refunds`).Scan(&rows))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM river_job WHERE kind = 'refund_payment'`).Scan(&jobs))
	require.Equal(t, 1, rows)
	require.Equal(t, 1, jobs)
}
