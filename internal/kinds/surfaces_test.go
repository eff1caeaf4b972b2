package kinds_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/console"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/payouts"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// transfers is a kind a clone adds to the registry: transfers to connected
// accounts, ids trf_…, in the states pending and paid, acting on the
// provider's transfers (tr_…) and answering their transfer.paid events.
// What no surface asks of it here (its table, its workers) is payouts'.
type transfers struct {
	operation.Kind
	// settled receives every event the kind is asked to settle.
	settled chan operation.Event
}

func addedKind() transfers {
	return transfers{Kind: payouts.Kind(), settled: make(chan operation.Event, 8)}
}

func (transfers) Name() string               { return "transfer" }
func (transfers) IDPrefixes() []string       { return []string{"trf"} }
func (transfers) Owns(id string) bool        { return strings.HasPrefix(id, "trf_") }
func (transfers) Statuses() []string         { return []string{"pending", "paid"} }
func (transfers) ProviderPrefixes() []string { return []string{"tr"} }
func (transfers) EventTypes() []string       { return []string{"transfer.paid"} }

func (transfers) Routes(r chi.Router, _ operation.Deps) {
	r.Get("/transfers/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
}

func (t transfers) SettleEvent(_ context.Context, _ operation.Env, ev operation.Event) (string, error) {
	t.settled <- ev
	return operation.Settled, nil
}

// TestAKindAddedReachesEverySurface: a kind added to the registry, and
// nowhere else, is found by every surface that lists or reaches kinds: the
// API mounts its routes, the operator's commands name it in their help and
// filter by its states, the console lists it, and the webhooks store its
// events with a job and hand them to it. (The metrics: the two tests
// above.)
func TestAKindAddedReachesEverySurface(t *testing.T) {
	t.Parallel()
	added := addedKind()
	registry := append(kinds.All(), added)
	ctx := t.Context()
	logger := slog.New(slog.DiscardHandler)
	db, _ := pgtest.NewPool(t)

	t.Run("API", func(t *testing.T) {
		acme, err := tenant.Create(ctx, db, t.Name())
		require.NoError(t, err)
		status := func(ks operation.Kinds, apiKey string) int {
			req := httptest.NewRequest(http.MethodGet, "/v1/transfers/trf_1", nil)
			req.Header.Set("Authorization", "Bearer "+apiKey)
			rec := httptest.NewRecorder()
			api.NewHandler(api.Deps{Kinds: ks, Logger: logger, Pool: db, Keys: idempotency.NewStore(idempotency.Config{})}).ServeHTTP(rec, req)
			return rec.Code
		}
		require.Equal(t, http.StatusNotFound, status(kinds.All(), acme.APIKey))
		require.Equal(t, http.StatusOK, status(registry, acme.APIKey))
		require.Equal(t, http.StatusUnauthorized, status(registry, "opk_none"), "mounted behind the API's authentication")
	})

	t.Run("Operator", func(t *testing.T) {
		help := func(words string) string {
			cmd, err := operator.Parse(append([]string{"api"}, strings.Fields(words+" --help")...), operator.Variables{}, registry)
			require.NoError(t, err)
			var b bytes.Buffer
			require.NoError(t, cmd.WriteHelp(&b))
			return b.String()
		}
		for _, words := range []string{"reconcile", "keys release", "operations list", "operations show"} {
			require.Contains(t, help(words), "transfer", words)
		}
		require.Contains(t, help("reconcile"), "transfer (trf_…)")
		require.Contains(t, help("ledger check"), "transfers", "its ledger check (payouts', here)")

		run := func(words string) error {
			cmd, err := operator.Parse(append([]string{"api"}, strings.Fields(words)...), operator.Variables{}, registry)
			require.NoError(t, err)
			// The provider answers nothing: an operation that is none of
			// the kind's is refused before anything asks it.
			getenv := map[string]string{"STRIPE_SECRET_KEY": "sk_test_surfaces", "STRIPE_API_BASE": "http://127.0.0.1:9"}
			return operator.Run(ctx, cmd, operator.Deps{Pool: db, Stdout: &bytes.Buffer{},
				Getenv: func(name string) string { return getenv[name] }})
		}
		require.ErrorContains(t, run("operations list transfer --status processing"), "the states are pending, paid")
		require.NoError(t, run("operations list transfer --status paid"))
		require.ErrorContains(t, run("reconcile trf_1"), "trf_1", "found by its id, then looked up")
		require.NotContains(t, run("reconcile trf_1").Error(), "no operation's id")
	})

	t.Run("Console", func(t *testing.T) {
		srv := httptest.NewServer(console.Handler(console.Config{Pool: db, Keys: idempotency.NewStore(idempotency.Config{}),
			Metrics: prometheus.NewRegistry(), Logger: logger, Kinds: registry}))
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + console.Path + "operations?kind=transfer&status=paid")
		require.NoError(t, err)
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, body.String())
		require.Contains(t, body.String(), `<option value="transfer" selected>transfer</option>`)
	})

	t.Run("Webhooks", func(t *testing.T) {
		inserter, err := outbox.NewInsertOnly(db, logger)
		require.NoError(t, err)
		ev := provider.Event{ID: id.New("evt"), Type: "transfer.paid", Created: time.Now(), ObjectID: id.New("tr"), Payload: []byte(`{}`)}
		stored, err := webhooks.Ingest(ctx, db, outbox.New(inserter), ev, webhooks.SourceWebhook, registry)
		require.NoError(t, err)
		require.True(t, stored)
		var jobs int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'event_id' = $1`, ev.ID).Scan(&jobs))
		require.Equal(t, 1, jobs, "stored with its job, not ignored")

		result, err := webhooks.NewProcessor(db, nil, nil, logger, webhooks.ProcessorConfig{Kinds: registry}).Process(ctx, ev.ID)
		require.NoError(t, err)
		require.Equal(t, operation.Settled, result)
		got := <-added.settled
		require.Equal(t, ev.ObjectID, got.ObjectID)
		require.Equal(t, "transfer.paid", got.Type)
		require.Contains(t, webhooks.EventTypes(registry), "transfer.paid", "the events its endpoint is enabled for")
	})
}
