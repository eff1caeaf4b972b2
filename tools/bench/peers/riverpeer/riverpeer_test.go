package riverpeer_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/peertest"
	"github.com/oncepay/oncepay/tools/bench/peers/riverpeer"
)

// setup starts the peer on a database and a simulator of the test's own.
func setup(t *testing.T) peertest.Peer[*riverpeer.Server] { return peertest.Start(t, riverpeer.Start) }

const body = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

func TestChargesOnceAndRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Eventually(t, func() bool {
		r, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
		return ok && r.Status == "succeeded"
	}, 10*time.Second, 20*time.Millisecond)
	status, header, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, "true", header.Get("Idempotent-Replayed"), "River's unique job took the retry")
	require.Len(t, peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1")), 1)
}

// TestAnotherBodyUnderTheSameKeyIsAcceptedAndDropped: what River's unique
// jobs give is one job per tenant and key, whatever the body. The second
// request, 2500 where the first was 2000, is answered 202 like a retry
// (oncepay answers 422), and only the first is charged and recorded.
func TestAnotherBodyUnderTheSameKeyIsAcceptedAndDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	status, _, _ = peertest.Pay(t, b.PeerURL, "ten_a", "key-1", `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusAccepted, status, "the other body is accepted, not refused")
	require.Eventually(t, func() bool {
		_, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
		return ok
	}, 10*time.Second, 20*time.Millisecond)
	r, _ := peertest.Record(t, b.DBURL, "ten_a", "key-1")
	require.EqualValues(t, 2000, r.Amount, "the second body was dropped")
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.EqualValues(t, 2000, intents[0].Amount)
}

// TestALostAnswerIsNeverRecorded: the provider charges, then answers 500
// (the simulator stores that 500 under the key and replays it, as Stripe
// does). The job retries with the same key and gets the same 500 each
// time: the charge succeeded, and the peer never records it; nothing looks
// it up (oncepay's reconciler finds it, and its ledger check would flag an
// unknown charge).
func TestALostAnswerIsNeverRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	peertest.InjectFault(t, b.SimURL, peertest.Fault{Mode: "error_after", Status: 500, Count: 1, Path: "POST /v1/payment_intents"})
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)

	conn, err := pgx.Connect(context.Background(), b.DBURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var attempts, errs int
	var state string
	require.Eventually(t, func() bool {
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT attempt, coalesce(array_length(errors, 1), 0), state FROM river_job WHERE kind = 'charge'`).Scan(&attempts, &errs, &state))
		return errs >= 2
	}, 20*time.Second, 50*time.Millisecond, "the job retried")
	require.NotEqual(t, "completed", state)
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.Equal(t, "succeeded", intents[0].Status, "the provider charged")
	_, recorded := peertest.Record(t, b.DBURL, "ten_a", "key-1")
	require.False(t, recorded, "the peer never learns it")
}
