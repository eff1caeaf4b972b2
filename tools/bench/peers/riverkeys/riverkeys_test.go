package riverkeys_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/peertest"
	"github.com/oncepay/oncepay/tools/bench/peers/riverkeys"
)

// setup starts the peer on a database and a simulator of the test's own.
func setup(t *testing.T) peertest.Peer[*riverkeys.Server] { return peertest.Start(t, riverkeys.Start) }

const body = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

// TestChargesOnceAndReplays: the charge is made once and recorded; a
// retry replays the key's 202 while the charge runs and its final answer
// once recorded.
func TestChargesOnceAndReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, header, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Empty(t, header.Get("Idempotent-Replayed"))
	require.Eventually(t, func() bool {
		r, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
		return ok && r.Status == "succeeded"
	}, 10*time.Second, 20*time.Millisecond)
	status, header, answer := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusCreated, status, "the final answer the key stored with the outcome")
	require.Equal(t, "true", header.Get("Idempotent-Replayed"))
	var out peers.Outcome
	require.NoError(t, json.Unmarshal([]byte(answer), &out))
	require.Equal(t, "succeeded", out.Status)
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.Equal(t, intents[0].ID, out.IntentID)
}

// TestAnotherBodyUnderTheSameKeyIsRefused: the key keeps its request's
// fingerprint, so 2500 under the key of 2000 is a 422, as in oncepay.
func TestAnotherBodyUnderTheSameKeyIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	status, _, _ = peertest.Pay(t, b.PeerURL, "ten_a", "key-1", `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Eventually(t, func() bool {
		r, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
		return ok && r.Status == "succeeded"
	}, 10*time.Second, 20*time.Millisecond)
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.EqualValues(t, 2000, intents[0].Amount)
}

// TestALostAnswerIsNeverRecorded: the provider charges, then answers 500,
// and replays that 500 under the key. The job retries into it; with the
// attempt's clock kept, the charge could be looked up, but nothing here
// does (oncepay's reconciler does): the payment and its key stay
// processing while the provider holds a succeeded charge.
func TestALostAnswerIsNeverRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	peertest.InjectFault(t, b.SimURL, peertest.Fault{Mode: "error_after", Status: 500, Count: 1, Path: "POST /v1/payment_intents"})
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)

	conn, err := pgx.Connect(context.Background(), b.DBURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var errs int
	require.Eventually(t, func() bool {
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT coalesce(array_length(errors, 1), 0) FROM river_job WHERE kind = 'charge'`).Scan(&errs))
		return errs >= 2
	}, 20*time.Second, 50*time.Millisecond, "the job retried")
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.Equal(t, "succeeded", intents[0].Status, "the provider charged")
	r, _ := peertest.Record(t, b.DBURL, "ten_a", "key-1")
	require.Equal(t, "processing", r.Status, "the peer never learns it")
	var attempted bool
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT attempt_deadline IS NOT NULL FROM payments`).Scan(&attempted))
	require.True(t, attempted, "the attempt's clock was committed before the call")
	status, _, _ = peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status, "a retry still gets the 202: the outcome is not known")
}
