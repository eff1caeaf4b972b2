package memo_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/examples/memo"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestMemoEndpointIsIdempotent: the worked example, mounted in the real
// API's /v1 group as the guide says, keeps the whole contract.
func TestMemoEndpointIsIdempotent(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, memo.Schema)
	require.NoError(t, err)

	// The mount below is the one the add-an-endpoint guide (docs/template.md)
	// shows for cmd/api's api.Deps; a test in tools/doccheck keeps them equal.
	srv := apitest.StartWithRoutes(t, pool, func(r chi.Router, d api.Deps) {
		r.Method(http.MethodPost, "/memos", memo.Handler(d.Pool, d.Keys, d.Logger))
	})
	send := func(key, body string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/memos", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+srv.Tenant.APIKey)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(data)
	}
	const key = "0f8e2b1a-memo-example"
	body := `{"subject": "Invoice 42", "text": "Paid by wire on the 3rd."}`

	// Twenty concurrent first requests: one memo, one answer.
	var wg sync.WaitGroup
	answers := make([]string, 20)
	for i := range answers {
		wg.Go(func() {
			resp, data := send(key, body)
			if resp.StatusCode == http.StatusCreated {
				answers[i] = data
			}
		})
	}
	wg.Wait()
	first, replay := send(key, body)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.Equal(t, "true", first.Header.Get(idempotency.ReplayedHeader))
	for _, a := range answers {
		if a != "" {
			require.JSONEq(t, replay, a, "every 201 is the same answer")
		}
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM memos").Scan(&rows))
	require.Equal(t, 1, rows)

	resp, _ := send(key, `{"subject": "Invoice 43", "text": "Paid by wire on the 3rd."}`)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "same key, another memo")
	resp, _ = send("", body)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no key")
	resp, data := send("1c9d7e3f-memo-example", `{"subject": 7}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, data, "subject")
	require.Contains(t, data, "text")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM memos").Scan(&rows))
	require.Equal(t, 1, rows, "nothing else was written")
}
