package operation_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/platform/id"
)

// settleEvent answers the provider's event about obj on account, as the
// webhooks do, and returns what it did.
func (b *bench) settleEvent(t *testing.T, obj widgetObject, account string) string {
	t.Helper()
	did, err := b.kind.spec().SettleEvent(b.ctx, b.env, operation.Event{ID: "evt_" + obj.ID, Type: "widget.updated", Account: account, ObjectID: obj.ID})
	require.NoError(t, err)
	return did
}

// TestEventsSettleWhatTheirObjectProves: an event records what its
// object, read again, proves of the widget it was made for in its current
// generation, exactly as the worker would, once. An object of another
// account, or naming none of our widgets, is not ours; one without our
// metadata is the widget's that recorded it; a second object
// naming a recorded widget, in its generation or an earlier one, changes
// nothing and is filed once as a finding; the object of a lost
// life of a widget's request is adopted by the widget made for it since.
func TestEventsSettleWhatTheirObjectProves(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	resumed := b.resumeNeverSent(t, b.newWidget(t))
	b.startWorker(t, 4, false)

	w := b.await(t, b.newWidget(t, storedServerError(widgetSucceeded)), widgetInReconciliation)
	made := b.provider.objectsOf(w.ID)[0]
	require.Equal(t, operation.NotOurs, b.settleEvent(t, made, "acct_elsewhere"), "another account's object can name any widget")
	require.Equal(t, widgetInReconciliation, b.widget(t, w.ID).Status)
	require.Equal(t, operation.Settled, b.settleEvent(t, made, ""))
	w = b.requireRecorded(t, w, widgetSucceeded)
	require.Equal(t, made.ID, operation.Deref(w.ProviderWidgetID))
	require.Equal(t, operation.Unchanged, b.settleEvent(t, made, ""), "delivered again")
	require.Equal(t, 1, b.receipts(t, w.ID))

	stray := b.provider.makeObject(widgetSucceeded, map[string]string{"widget_id": id.New("wgt"), operation.MetadataTenantID: b.tenantID})
	require.Equal(t, operation.NotOurs, b.settleEvent(t, *stray, ""))
	bare := b.provider.makeObject(widgetSucceeded, nil)
	require.Equal(t, operation.NotOurs, b.settleEvent(t, *bare, ""), "no metadata, and no widget recorded it")
	recorder := b.await(t, b.newWidget(t, storedServerError(widgetSucceeded)), widgetInReconciliation)
	_, err := b.pool.Exec(b.ctx, `UPDATE widgets SET provider_widget_id = $1 WHERE id = $2`, bare.ID, recorder.ID)
	require.NoError(t, err)
	require.Equal(t, operation.Settled, b.settleEvent(t, *bare, ""), "an object without metadata is the widget's that recorded it")
	require.Equal(t, bare.ID, operation.Deref(b.requireRecorded(t, recorder, widgetSucceeded).ProviderWidgetID))

	copied := b.provider.makeObject(widgetFailed, made.Metadata)
	for range 2 {
		require.Equal(t, operation.FiledFinding, b.settleEvent(t, *copied, ""))
	}
	require.Equal(t, made.ID, operation.Deref(b.requireRecorded(t, w, widgetSucceeded).ProviderWidgetID), "the widget keeps its object")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM ledger_findings WHERE kind = $1 AND operation_id = $2 AND provider_object_id = $3
		AND evidence->>'source' = 'provider_object' AND payment_id IS NULL`, ledger.KindDuplicateObject, w.ID, copied.ID), "filed once")

	resumed = b.requireRecorded(t, b.await(t, resumed, widgetSucceeded), widgetSucceeded)
	require.Equal(t, 2, resumed.ProviderKeyGeneration)
	earlier := map[string]string{}
	for k, v := range b.provider.objectsOf(resumed.ID)[0].Metadata {
		earlier[k] = v
	}
	earlier["widget_generation"] = "1"
	require.Equal(t, operation.FiledFinding, b.settleEvent(t, *b.provider.makeObject(widgetFailed, earlier), ""),
		"generation 1 was proven never made, yet an object names it (a lost commit broke the proof): a second object for the request")
	require.Equal(t, widgetSucceeded, b.widget(t, resumed.ID).Status, "the widget keeps the object it recorded")

	unsent := b.await(t, b.newWidget(t, refusedBySend(&operation.HandOverError{Reason: "the widget's account changed"})), widgetInReconciliation)
	lostLife := b.provider.makeObject(widgetSucceeded, map[string]string{"widget_id": id.New("wgt"), operation.MetadataTenantID: b.tenantID,
		"widget_generation": "1", operation.MetadataRef: operation.Deref(unsent.Ref)})
	require.Equal(t, operation.Settled, b.settleEvent(t, *lostLife, ""))
	unsent = b.requireRecorded(t, unsent, widgetSucceeded)
	require.Equal(t, lostLife.ID, operation.Deref(unsent.ProviderWidgetID), "adopted")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM ledger_findings`), "the copy's and generation 1's, nothing else filed")
}
