package dbospeer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/bench/peers"
	"github.com/oncepay/oncepay/tools/bench/peers/peertest"
)

type bundle = peertest.Peer[*Server]

// setup starts the peer on a database and a simulator of the test's own.
func setup(t *testing.T) bundle {
	return peertest.Start(t, func(ctx context.Context, cfg peers.Config) (*Server, error) { return Start(ctx, Config{Config: cfg}) })
}

const body = `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`

// state is the workflow's status, as a replay of the first request
// answers it.
func state(t *testing.T, b bundle, tenant, key string) string {
	t.Helper()
	status, header, answer := peertest.Pay(t, b.PeerURL, tenant, key, body)
	require.Equal(t, http.StatusAccepted, status, answer)
	require.Equal(t, "true", header.Get("Idempotent-Replayed"))
	var a peers.Accepted
	require.NoError(t, json.Unmarshal([]byte(answer), &a))
	return a.Status
}

func TestChargesOnceAndRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Eventually(t, func() bool {
		r, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
		return ok && r.Status == "succeeded"
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return state(t, b, "ten_a", "key-1") == string(dbos.WorkflowStatusSuccess) },
		10*time.Second, 20*time.Millisecond)
	require.Len(t, peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1")), 1)
}

// TestAnotherBodyUnderTheSameKeyIs422: DBOS itself answers a repeated
// workflow ID with the first workflow and ignores the new input (shown
// first, through DBOS directly); the peer checks the fingerprint itself,
// so the other body is refused, as oncepay refuses it.
func TestAnotherBodyUnderTheSameKeyIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)

	other, err := peers.ReadRequest(payRequest(t, "ten_a", "key-1", `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.NoError(t, err)
	handle, err := dbos.RunWorkflow(b.Server.dbos, b.Server.charge, Charge{Request: other, AcceptedAt: time.Now()},
		dbos.WithWorkflowID(WorkflowID("ten_a", "key-1")), dbos.WithQueue(b.Server.queue))
	require.NoError(t, err, "DBOS takes the repeated ID without a word")
	_, err = handle.GetResult(dbos.WithHandleTimeout(10 * time.Second))
	require.NoError(t, err)
	r, ok := peertest.Record(t, b.DBURL, "ten_a", "key-1")
	require.True(t, ok)
	require.EqualValues(t, 2000, r.Amount, "DBOS ran the first input, not the new one")

	status, _, answer := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, answer)
	require.Len(t, peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1")), 1)
}

// TestALostAnswerIsNeverRecorded: the provider charges, then answers 500
// (the simulator stores that 500 under the key and replays it, as Stripe
// does). The provider step's retries get the same 500, the workflow ends
// in ERROR, and the charge that succeeded is never recorded; nothing looks
// it up afterwards (oncepay's reconciler finds it, and its ledger check
// would flag an unknown charge).
func TestALostAnswerIsNeverRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	peertest.InjectFault(t, b.SimURL, peertest.Fault{Mode: "error_after", Status: 500, Count: 1, Path: "POST /v1/payment_intents"})
	status, _, _ := peertest.Pay(t, b.PeerURL, "ten_a", "key-1", body)
	require.Equal(t, http.StatusAccepted, status)
	require.Eventually(t, func() bool { return state(t, b, "ten_a", "key-1") == string(dbos.WorkflowStatusError) },
		15*time.Second, 50*time.Millisecond, "the workflow gave up")
	intents := peertest.Intents(t, b.SimURL, peers.ProviderKey("ten_a", "key-1"))
	require.Len(t, intents, 1)
	require.Equal(t, "succeeded", intents[0].Status, "the provider charged")
	_, recorded := peertest.Record(t, b.DBURL, "ten_a", "key-1")
	require.False(t, recorded, "the peer never learns it")
}

func payRequest(t *testing.T, tenant, key, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+tenant)
	r.Header.Set("Idempotency-Key", key)
	return r
}
