package payments_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payments"
	"github.com/oncepay/oncepay/internal/platform/fastpath"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestChargeRoundTrips pins how often a charge that succeeds talks to the
// database: once before the provider call (read the payment and start the
// attempt, committed on its own), then one transaction that records the
// outcome, the stored answer and the job's completion. River's own fetch
// and completion bookkeeping come on top, shared by the jobs of a batch.
func TestChargeRoundTrips(t *testing.T) {
	if !fastpath.Built {
		t.Skip("it measures a fast path, and this build has none (plainpaths)")
	}
	t.Parallel()
	ctx := context.Background()
	pool, dbURL := pgtest.NewPool(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: logger}))
	t.Cleanup(sim.Close)
	api := apitest.Start(t, pool)

	accepted := api.Pay(t, id.New("key"), "pm_card_visa")
	require.Equal(t, http.StatusAccepted, accepted.Status, accepted.Raw)
	paymentID := accepted.Body["id"].(string)

	// The job as River hands it to a worker: running, first attempt.
	var jobID int64
	require.NoError(t, pool.QueryRow(ctx, `
		UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
		WHERE kind = 'charge_payment' AND args->>'payment_id' = $1 RETURNING id`, paymentID).Scan(&jobID))
	jobs, err := outbox.NewInsertOnly(pool, logger)
	require.NoError(t, err)
	row, err := jobs.JobGet(ctx, jobID)
	require.NoError(t, err)

	traced, log := pgtest.TracedPool(t, dbURL)
	require.NoError(t, traced.Ping(ctx)) // the connection's own setup is not the job's
	log.Take()
	worker := payments.NewChargeWorker(traced, api.Keys, provider.New(provider.Config{SecretKey: "sk_test_oncepay", APIBase: sim.URL}),
		logger, operation.WorkerConfig{JobTimeout: 5 * time.Second})
	err = worker.Work(rivertest.WorkContext(ctx, jobs), &river.Job[payments.ChargeArgs]{JobRow: row,
		Args: payments.ChargeArgs{TenantID: api.Tenant.TenantID, ID: paymentID}})
	require.NoError(t, err)
	sent := log.Take()
	t.Logf("charge, %d round trips:\n  %s", len(sent), strings.Join(sent, "\n  "))

	got := api.Get(t, "/v1/payments/"+paymentID)
	require.Equal(t, "succeeded", got.Body["status"])
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, jobID).Scan(&state))
	require.Equal(t, "completed", state)
	require.LessOrEqual(t, len(sent), 5, "charge round trips")
}
