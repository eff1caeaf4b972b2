package baseline_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/bench/baseline"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestWritesANewKeysRows: a POST writes the key with its 202, the payment
// and its job, together; a second POST under the same key writes nothing
// (the batch is one transaction), and an unknown API key is not served.
func TestWritesANewKeysRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO tenants (id, name) VALUES ('ten_bare', 'bare')`)
	require.NoError(t, err)
	srv := httptest.NewServer(baseline.Handler(pool, map[string]string{"opk_bare": "ten_bare"}))
	t.Cleanup(srv.Close)

	post := func(apiKey, key string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments",
			strings.NewReader(`{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	status, body := post("opk_bare", "bare-key-0000000001")
	require.Equal(t, http.StatusAccepted, status, body)
	var answer struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(body), &answer))
	status, body = post("opk_bare", "bare-key-0000000001")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	status, _ = post("opk_other", "bare-key-0000000002")
	require.Equal(t, http.StatusNotFound, status)

	var keys, payments, jobs int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM idempotency_keys WHERE tenant_id = 'ten_bare' AND status = 'processing' AND response_status = 202),
		       (SELECT count(*) FROM payments WHERE tenant_id = 'ten_bare' AND status = 'processing' AND amount = 2000),
		       (SELECT count(*) FROM river_job WHERE queue = $1 AND args->>'tenant_id' = 'ten_bare')`, baseline.Queue).
		Scan(&keys, &payments, &jobs))
	require.Equal(t, []int{1, 1, 1}, []int{keys, payments, jobs})
	var paymentID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM payments WHERE tenant_id = 'ten_bare'`).Scan(&paymentID))
	require.Equal(t, paymentID, answer.ID)
}
