package kinds_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/provider"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// TestKindsAreDistinct: every registered kind has a name, an id prefix and
// periodic jobs of its own, and they start side by side on one worker (a
// River kind registered twice would refuse to).
func TestKindsAreDistinct(t *testing.T) {
	t.Parallel()
	all := kinds.All()
	names, jobs := map[string]bool{}, map[string]bool{}
	for _, k := range all {
		require.False(t, names[k.Name()], "kind %s registered twice", k.Name())
		names[k.Name()] = true
		require.NotEmpty(t, k.IDPrefixes(), "kind %s has no id prefix", k.Name())
		for _, prefix := range k.IDPrefixes() {
			other, ok := all.Of(prefix + "_01JD3W9ZC6M7X4Q2V8N5R0T1YB")
			require.True(t, ok)
			require.Equal(t, k.Name(), other.Name(), "an id of %s is owned by %s", k.Name(), other.Name())
		}
	}
	periodic, err := startAll(all)
	require.NoError(t, err)
	for _, p := range periodic {
		require.False(t, jobs[p.Args.Kind()], "periodic job %s twice", p.Args.Kind())
		jobs[p.Args.Kind()] = true
	}
	for _, want := range []string{"reconcile_payments", "sweep_stranded_refunds", "reconcile_captures", "sweep_stranded_cancels",
		"reconcile_payouts", "ledger_check_payments", "ledger_check_refunds"} {
		require.True(t, jobs[want], "no periodic job %s among %v", want, jobs)
	}
}

func startAll(all operation.Kinds) ([]operation.Periodic, error) {
	workers := river.NewWorkers()
	var periodic []operation.Periodic
	for _, k := range all {
		p, err := k.Start(workers, operation.Env{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		periodic = append(periodic, p...)
	}
	return periodic, nil
}

// TestEveryKindsTableHasTheLifecycle: the engine's SQL runs against every
// kind's table: each has the lifecycle columns, and a claim's columns
// read.
func TestEveryKindsTableHasTheLifecycle(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	ctx := context.Background()
	for _, k := range kinds.All() {
		table := k.Table()
		for _, column := range []string{"id", "tenant_id", "idempotency_key", "status", "provider_idempotency_key", "provider_key_generation",
			"first_provider_attempt_at", "last_provider_attempt_at", "provider_attempt_deadline", "reconcile_after", "reconcile_attempts",
			"failure_code", "failure_message", "created_at", "updated_at", table.ProviderIDColumn} {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = $2`,
				table.Name, column).Scan(&n))
			require.Equal(t, 1, n, "%s: no column %s.%s", k.Name(), table.Name, column)
		}
		_, err := pool.Exec(ctx, `SELECT `+table.ClaimColumns(1)+` FROM `+table.Name+` LIMIT 0`, int64(0))
		require.NoError(t, err, "%s: its claim does not read", k.Name())
	}
}

// TestEveryKindsStatesAreItsTables: the states a kind declares (what the
// operator's commands filter by) are exactly those its table's status
// column allows.
func TestEveryKindsStatesAreItsTables(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	quoted := regexp.MustCompile(`'([a-z_]+)'`)
	for _, k := range kinds.All() {
		var check string
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%(status %'`,
			k.Table().Name).Scan(&check), k.Name())
		var allowed []string
		for _, m := range quoted.FindAllStringSubmatch(check, -1) {
			allowed = append(allowed, m[1])
		}
		require.ElementsMatch(t, allowed, k.Statuses(), "%s: its table allows %s", k.Name(), check)
	}
}

// TestProviderCallsFoldEveryKindsIDs: the provider-call metrics' operation
// label is one of the provider's routes, never one object's: the ids of
// the provider objects of every registered kind, and of a kind added to the
// registry, fold into {id} as the worker wires them, so calls about more
// objects add no series.
func TestProviderCallsFoldEveryKindsIDs(t *testing.T) {
	t.Parallel()
	sim := httptest.NewServer(stripesim.New(stripesim.Config{Logger: slog.New(slog.DiscardHandler)}))
	defer sim.Close()
	all := append(kinds.All(), addedKind())
	m := metrics.New()
	client := &http.Client{Transport: m.ProviderTransport(nil, all.ProviderPrefixes()...)}
	pc := provider.New(provider.Config{SecretKey: "sk_test_kinds", APIBase: sim.URL, HTTPClient: client})
	ctx := t.Context()
	callAbout := func() {
		object := id.New("x")[2:]
		pc.RetrieveIntent(ctx, provider.IntentPrefix+"_"+object)
		pc.CaptureIntent(ctx, provider.IntentPrefix+"_"+object, 100, id.New("k"))
		pc.CancelIntent(ctx, provider.IntentPrefix+"_"+object, id.New("k"))
		pc.RetrieveRefund(ctx, provider.RefundPrefix+"_"+object)
		pc.RetrievePayout(ctx, provider.PayoutPrefix+"_"+object)
		pc.CancelPayout(ctx, provider.PayoutPrefix+"_"+object, id.New("k"))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, sim.URL+"/v1/transfers/tr_"+object, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	callAbout()
	first := providerOperations(t, m)
	require.Contains(t, first, "GET /v1/transfers/{id}")
	for _, op := range first {
		require.Regexp(t, `^(GET|POST) /v1(/[a-z_]+|/\{id\})+$`, op, "an object's id in the operation label")
	}
	for range 3 {
		callAbout()
	}
	require.Equal(t, first, providerOperations(t, m), "calls about more objects added series")
}

// TestMetricsHelpNamesEveryKind: the help of every series counted by kind
// names the registry's kinds, a kind added to it included.
func TestMetricsHelpNamesEveryKind(t *testing.T) {
	t.Parallel()
	all := append(kinds.All(), addedKind())
	m := metrics.New(all.Names()...)
	m.KeySwept("payment")
	m.GroupFellBack("start", "payment")
	m.GroupFellBack("record", "payment")
	m.Reconciliations("payment", "settled", 1)
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	byKind := map[string]bool{"oncepay_idempotency_keys_swept_total": true, "oncepay_start_group_fallbacks_total": true,
		"oncepay_record_group_fallbacks_total": true, "oncepay_reconciliations_total": true}
	seen := 0
	for _, f := range families {
		if !byKind[f.GetName()] {
			continue
		}
		seen++
		for _, name := range all.Names() {
			require.Contains(t, f.GetHelp(), name, f.GetName())
		}
	}
	require.Equal(t, len(byKind), seen)
}

// providerOperations are the operation labels of the provider-call counter.
func providerOperations(t *testing.T, m *metrics.Metrics) []string {
	t.Helper()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	var ops []string
	for _, f := range families {
		if f.GetName() != "oncepay_provider_calls_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "operation" && !slices.Contains(ops, l.GetValue()) {
					ops = append(ops, l.GetValue())
				}
			}
		}
	}
	slices.Sort(ops)
	return ops
}
