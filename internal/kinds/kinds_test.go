package kinds_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
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
		other, ok := all.Of(someID(t, k))
		require.True(t, ok)
		require.Equal(t, k.Name(), other.Name(), "an id of %s is owned by %s", k.Name(), other.Name())
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

// someID is an id of k's, from its own table's definition: what an
// operator's command is given.
func someID(t *testing.T, k operation.Kind) string {
	t.Helper()
	for _, prefix := range []string{"pay", "rfd", "cap", "ccl", "pyo"} {
		if id := prefix + "_01JD3W9ZC6M7X4Q2V8N5R0T1YB"; k.Owns(id) {
			return id
		}
	}
	t.Fatalf("kind %s owns none of the known prefixes", k.Name())
	return ""
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
		_, err := pool.Exec(ctx, `SELECT `+table.ClaimColumns(operation.SettledColumn(1))+` FROM `+table.Name+` LIMIT 0`, int64(0))
		require.NoError(t, err, "%s: its claim does not read", k.Name())
	}
}
