package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
)

// TestTwoInstancesNeverOverRefund sends twenty refunds of 300 for one
// payment of 2000, each with its own key, split across two running API
// programs with pools of their own: exactly six are accepted, and the
// refunds written never exceed the payment.
func TestTwoInstancesNeverOverRefund(t *testing.T) {
	t.Parallel()
	dbURL := migratedDatabase(t)
	created := createTenant(t, dbURL)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	paymentID := id.New("pay")
	_, err = pool.Exec(context.Background(), `
		INSERT INTO payments (id, tenant_id, idempotency_key, amount, currency, payment_method, status,
			provider_idempotency_key, provider_payment_intent_id, amount_captured)
		VALUES ($1, $2, $3, 2000, 'usd', 'pm_card_visa', 'succeeded', $4, 'pi_test', 2000)`,
		paymentID, created.TenantID, id.New("key"), id.New("pk"))
	require.NoError(t, err)
	vars := func() map[string]string { return map[string]string{"DATABASE_URL": dbURL} }
	bases := []string{startAPI(t, vars()), startAPI(t, vars())}

	const n = 20
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		accepted int
	)
	for i := range n {
		wg.Go(func() {
			<-start
			key := id.New("key")
			for {
				req, err := http.NewRequest(http.MethodPost, bases[i%2]+"/v1/payments/"+paymentID+"/refunds", strings.NewReader(`{"amount": 300}`))
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set("Authorization", "Bearer "+created.APIKey)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var problem struct{ Type string }
				_ = json.Unmarshal(body, &problem)
				// A payment held past the lock wait (a loaded machine) is
				// answered payment-busy, stored nowhere: retry, same key.
				if problem.Type == "/docs/problems/payment-busy" {
					continue
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case resp.StatusCode == http.StatusAccepted:
					accepted++
				case resp.StatusCode == http.StatusConflict && problem.Type == "/docs/problems/refund-exceeds-remaining":
				default:
					t.Errorf("unexpected %d: %s", resp.StatusCode, body)
				}
				return
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, 6, accepted, "as many refunds as fit, no more")
	var refunds, sum, jobs int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*), coalesce(sum(amount), 0) FROM refunds").Scan(&refunds, &sum))
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE kind = 'refund_payment'").Scan(&jobs))
	require.Equal(t, 6, refunds)
	require.Equal(t, 1800, sum)
	require.Equal(t, 6, jobs)
}
