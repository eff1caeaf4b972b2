package operation_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
)

// TestLedgerCheckFindsWhatTheBooksDoNotKnow: the check lists the
// provider's widgets and walks the widgets made, and files what disagrees,
// for an operator: an object naming a widget we do not know, a second
// object made for one widget's request (by a life whose rows were lost),
// a widget made whose object is gone or was never recorded. What agrees,
// and an object that is none of ours, is no finding; a finding already
// open is not filed again; an object that cannot be read is left for the
// next check. The check changes no widget and sends nothing.
func TestLedgerCheckFindsWhatTheBooksDoNotKnow(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.startWorker(t, 8, false)
	agreeing, duplicated, vanished, unrecorded := b.newWidget(t), b.newWidget(t), b.newWidget(t), b.newWidget(t)
	declined := b.newWidget(t, declines())
	for _, w := range []Widget{agreeing, duplicated, vanished, unrecorded} {
		b.await(t, w, widgetSucceeded)
	}
	b.await(t, declined, widgetFailed)
	vanished = b.widget(t, vanished.ID)
	b.provider.forget(*vanished.ProviderWidgetID)
	b.exec(t, `UPDATE widgets SET provider_widget_id = NULL WHERE id = $1`, unrecorded.ID)
	unknownID := id.New("wgt")
	stranger := b.provider.makeObject(widgetSucceeded, map[string]string{"widget_id": unknownID, operation.MetadataTenantID: b.tenantID})
	b.provider.makeObject(widgetSucceeded, map[string]string{"note": "made on the provider's dashboard"})
	secondMade := b.provider.makeObject(widgetSucceeded, map[string]string{"widget_id": id.New("wgt"), operation.MetadataTenantID: b.tenantID,
		"widget_generation": "1", operation.MetadataRef: operation.Deref(duplicated.Ref)})
	requests := b.provider.requestCount()
	var before []string
	for _, w := range []Widget{agreeing, duplicated, vanished, unrecorded, declined} {
		before = append(before, b.widget(t, w.ID).UpdatedAt.String())
	}

	checker := b.kind.spec().Ledger(b.env)
	check := func() (operation.LedgerCheckResult, []string) {
		res, err := checker.Check(b.ctx, time.Now().Add(-time.Hour), time.Now())
		require.NoError(t, err)
		var found []string
		for _, d := range res.Disagreements {
			found = append(found, d.Kind+" "+d.OperationID+" "+d.ProviderObjectID)
		}
		return res, found
	}
	want := []string{
		"unknown_widget " + unknownID + " " + stranger.ID,
		ledger.KindDuplicateObject + " " + duplicated.ID + " " + secondMade.ID,
		"missing_widget " + vanished.ID + " " + *vanished.ProviderWidgetID,
		"missing_widget " + unrecorded.ID + " ",
	}
	res, found := check()
	require.ElementsMatch(t, want, found)
	require.Equal(t, len(want), res.NewFindings())
	require.Equal(t, b.provider.objectCount(), res.Listed)
	require.Equal(t, 4, res.Succeeded, "the widgets made: the declined one is not")
	require.Zero(t, res.Unchecked)
	require.Equal(t, len(want), b.count(t, `SELECT count(*) FROM ledger_findings WHERE resolved_at IS NULL`))
	var evidence map[string]any
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT evidence FROM ledger_findings WHERE kind = $1 AND operation_id = $2`,
		ledger.KindDuplicateObject, duplicated.ID).Scan(&evidence))
	require.Equal(t, "ledger_check", evidence["source"])
	require.Equal(t, operation.Deref(duplicated.Ref), evidence[operation.MetadataRef])
	require.Contains(t, evidence["reason"], "were both made for one request")

	res, found = check()
	require.ElementsMatch(t, want, found, "still disagreeing")
	require.Zero(t, res.NewFindings(), "and filed once")
	require.Equal(t, len(want), b.count(t, `SELECT count(*) FROM ledger_findings`))

	b.provider.mu.Lock()
	b.provider.failReads = 1
	b.provider.mu.Unlock()
	res, found = check()
	require.Equal(t, 1, res.Unchecked, "the vanished widget's object could not be read")
	require.NotContains(t, found, "missing_widget "+vanished.ID+" "+*vanished.ProviderWidgetID, "unread is not missing")

	for i, w := range []Widget{agreeing, duplicated, vanished, unrecorded, declined} {
		require.Equal(t, before[i], b.widget(t, w.ID).UpdatedAt.String(), "the check changes no widget")
	}
	require.Equal(t, requests, b.provider.requestCount(), "and sends nothing")
}
