package kinds_test

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/apitest"
	"github.com/oncepay/oncepay/internal/testkit/pitr"
	"github.com/oncepay/oncepay/internal/testkit/stacktest"
)

// TestRestoreDrill restores a real database to a point in time taken
// before N payments, refunds and payouts were made (pg_basebackup and its
// archived WAL), while the service runs on it; runs the runbook's check,
// which names every object the restore made unknown; then every client
// retries its keys. Each retry ends with its first answer's object, the
// provider holds exactly one object per client key, and the check then
// finds nothing.
func TestRestoreDrill(t *testing.T) {
	t.Parallel()
	const n = 3
	db := pitr.Start(t)
	pool, err := pgxpool.New(t.Context(), db.URL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, postgres.Migrate(t.Context(), pool, slog.New(slog.DiscardHandler)))
	s := stacktest.StartOn(t, pool, 200*time.Millisecond)

	// Before the restore point: the payment the refunds give back from.
	funded := s.API.Post(t, "/v1/payments", id.New("key"), `{"amount": 90000, "currency": "usd", "payment_method": "pm_card_visa"}`, "Prefer", "wait=10")
	require.Equal(t, http.StatusCreated, funded.Status, funded.Raw)
	paymentID := funded.PaymentID()
	backup, err := db.Backup(s.Ctx)
	require.NoError(t, err)
	require.NoError(t, db.RestorePoint(s.Ctx, "before_the_drill"))

	// After it: what the restore loses, each made and answered.
	type request struct {
		kind, path, key, body, object string
	}
	var requests []request
	for i := range n {
		requests = append(requests,
			request{"payment", "/v1/payments", id.New("key"), fmt.Sprintf(`{"amount": %d, "currency": "usd", "payment_method": "pm_card_visa"}`, 1100+i), "provider_payment_intent_id"},
			request{"refund", "/v1/payments/" + paymentID + "/refunds", id.New("key"), fmt.Sprintf(`{"amount": %d}`, 700+i), "provider_refund_id"},
			request{"payout", "/v1/payouts", id.New("key"), fmt.Sprintf(`{"amount": %d, "currency": "usd"}`, 300+i), "provider_payout_id"})
	}
	send := func(r request) apitest.Response { return s.API.Post(t, r.path, r.key, r.body, "Prefer", "wait=10") }
	objects := map[string]string{}
	for _, r := range requests {
		first := send(r)
		require.Equal(t, http.StatusCreated, first.Status, first.Raw)
		objects[r.key] = first.Body[r.object].(string)
	}

	require.NoError(t, db.RestoreTo(s.Ctx, backup, "before_the_drill"))
	var lost int
	require.NoError(t, pool.QueryRow(s.Ctx, `SELECT (SELECT count(*) FROM payments) + (SELECT count(*) FROM refunds) + (SELECT count(*) FROM payouts)`).Scan(&lost))
	require.Equal(t, 1, lost, "the restore kept only what was made before its point")

	// The runbook's check names each object the database no longer knows,
	// as made by oncepay for a request whose rows are gone.
	check := func() []ledger.Disagreement {
		var all []ledger.Disagreement
		for _, k := range kinds.All() {
			pass := k.Ledger(s.Env)
			if pass == nil {
				continue
			}
			res, err := pass.Check(s.Ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
			require.NoError(t, err)
			all = append(all, res.Disagreements...)
		}
		return all
	}
	unknown := map[string]bool{}
	for _, d := range check() {
		unknown[cmp.Or(d.ProviderRefundID, d.IntentID, d.ProviderObjectID)] = true
	}
	var lostObjects []string
	for _, r := range requests {
		require.True(t, unknown[objects[r.key]], "the check names the %s %s the restore lost", r.kind, objects[r.key])
		lostObjects = append(lostObjects, objects[r.key])
	}
	var withRef int
	require.NoError(t, pool.QueryRow(s.Ctx, `SELECT count(*) FROM ledger_findings
		WHERE provider_object_id = ANY($1) AND evidence ? 'oncepay_ref' AND resolved_at IS NULL`, lostObjects).Scan(&withRef))
	require.Equal(t, len(requests), withRef, "each finding says oncepay made the object, for a request whose rows are gone")

	// Every client retries its keys: each ends with its first object.
	for _, r := range requests {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			again := send(r)
			if again.Status == http.StatusCreated && again.Body[r.object] == objects[r.key] {
				break
			}
			require.True(t, time.Now().Before(deadline), "the %s retried with key %s: last answered %d %s", r.kind, r.key, again.Status, again.Raw)
		}
	}
	for _, object := range []string{"payment_intent", "refund", "payout"} {
		made := map[string]int{}
		for _, o := range s.ProviderObjects(t, object, nil) {
			if ref := o.Metadata[operation.MetadataRef]; ref != "" {
				made[ref]++
			}
		}
		for ref, count := range made {
			require.Equal(t, 1, count, "one provider %s for the request %s", object, ref)
		}
	}
	require.Empty(t, check(), "every object the restore lost was adopted")
}
