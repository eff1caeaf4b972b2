package ledger_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

func TestOneOpenFindingPerDisagreement(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewPool(t)
	ctx := context.Background()

	for i, want := range []bool{true, false} {
		isNew, err := ledger.Record(ctx, pool, ledger.KindUnexpectedCharge, "", "pi_1", map[string]any{"seen": i})
		require.NoError(t, err)
		require.Equal(t, want, isNew, "record %d", i)
	}
	isNew, err := ledger.Record(ctx, pool, ledger.KindUnexpectedCharge, "", "pi_2", map[string]any{})
	require.NoError(t, err)
	require.True(t, isNew, "another provider object is another finding")

	open, err := ledger.Open(ctx, pool)
	require.NoError(t, err)
	require.Len(t, open, 2)
	require.JSONEq(t, `{"seen": 0}`, string(open[0].Evidence), "the first evidence is kept")

	_, err = pool.Exec(ctx, `UPDATE ledger_findings SET resolved_at = now(), resolution_note = 'refunded by hand' WHERE id = $1`, open[0].ID)
	require.NoError(t, err)
	isNew, err = ledger.Record(ctx, pool, ledger.KindUnexpectedCharge, "", "pi_1", map[string]any{"seen": 2})
	require.NoError(t, err)
	require.True(t, isNew, "once resolved, the same disagreement seen again is a new finding")
}
