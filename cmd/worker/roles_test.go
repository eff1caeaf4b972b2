package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestRuntimeRoleRunsTheService: deploy/db/roles.sql makes an owner role
// and a runtime role; the migrations run as the owner; the API and a worker
// process run as the runtime role through a payment, a manual capture, a
// refund and every maintenance job, without one error; and the runtime role
// can change no structure.
func TestRuntimeRoleRunsTheService(t *testing.T) {
	t.Parallel()
	suffix := strings.ToLower(id.New("r")[2:12])
	owner, app := "oncepay_owner_"+suffix, "oncepay_app_"+suffix
	pgtest.DropRolesAtCleanup(t, owner, app)
	adminURL := pgtest.NewEmptyDatabase(t)
	ctx := context.Background()

	ownerPassword, appPassword := id.New("pw"), id.New("pw")
	psql := exec.Command("psql", adminURL, "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-v", "owner_role="+owner, "-v", "app_role="+app,
		"-v", "owner_password="+ownerPassword, "-v", "app_password="+appPassword,
		"-f", "../../deploy/db/roles.sql")
	out, err := psql.CombinedOutput()
	require.NoError(t, err, "roles.sql: %s", out)
	// Again: it is safe to run on every deploy.
	out, err = exec.Command(psql.Args[0], psql.Args[1:]...).CombinedOutput()
	require.NoError(t, err, "roles.sql a second time: %s", out)

	ownerPool := openPool(t, pgtest.AsRole(t, adminURL, owner, ownerPassword))
	require.NoError(t, postgres.Migrate(ctx, ownerPool, slog.New(slog.NewTextHandler(io.Discard, nil))))

	appURL := pgtest.AsRole(t, adminURL, app, appPassword)
	appPool := openPool(t, appURL)
	for _, ddl := range []string{
		"DROP TABLE payments",
		"ALTER TABLE payments ADD COLUMN smuggled text",
		"TRUNCATE idempotency_keys",
		"CREATE TABLE smuggled (id int)",
		"DROP TABLE river_job",
	} {
		_, err := appPool.Exec(ctx, ddl)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: want a refusal, got %v", ddl, err)
		require.Equal(t, "42501", pgErr.Code, "%s: %s", ddl, pgErr.Message)
	}

	p := newPipelineOn(t, appPool, appURL, true)
	w := p.startWorker("RECONCILE_INTERVAL=200ms", "SWEEP_INTERVAL=200ms", "LEDGER_CHECK_INTERVAL=200ms",
		"WEBHOOK_RECOVER_INTERVAL=200ms", "IDEMPOTENCY_REAP_INTERVAL=1s")
	require.True(t, w.out.contains("River's nightly reindex is off: this role does not own its tables (the owner may run it)"),
		"the worker did not notice it runs as a role that cannot reindex:\n%s", w.out)

	paid := p.api.Pay(t, id.New("key"), "pm_card_visa", "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, paid.Status, paid.Raw)
	refunded := p.api.Refund(t, paid.PaymentID(), id.New("key"), `{"amount": 500}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, refunded.Status, refunded.Raw)
	authorized := p.api.Post(t, "/v1/payments", id.New("key"),
		`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "capture_method": "manual"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, authorized.Status, authorized.Raw)
	captured := p.api.Post(t, "/v1/payments/"+authorized.PaymentID()+"/capture", id.New("key"), `{}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusOK, captured.Status, captured.Raw)

	// Every periodic job ran to completion under the runtime role.
	periodic := []string{"close_declined_intents", "expire_authorizations", "ledger_check_payments", "ledger_check_refunds", "reap_idempotency_keys",
		"reconcile_cancels", "reconcile_captures", "reconcile_payments", "reconcile_refunds", "recover_webhook_events", "settle_awaiting_webhook_events",
		"sweep_stranded_cancels", "sweep_stranded_captures", "sweep_stranded_payments", "sweep_stranded_refunds"}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var kinds []string
		err := ownerPool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT kind ORDER BY kind), '{}') FROM river_job
			WHERE kind = ANY($1) AND state = 'completed'`, periodic).Scan(&kinds)
		assert.NoError(c, err)
		assert.Equal(c, periodic, kinds)
	}, 30*time.Second, 100*time.Millisecond)
	require.NotContains(t, w.out.String(), `"level":"ERROR"`)
	require.NotContains(t, w.out.String(), `"level":"WARN"`)
}

func openPool(t *testing.T, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
