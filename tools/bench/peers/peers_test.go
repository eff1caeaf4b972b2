package peers_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/tools/bench/peers"
)

func request(tenant, key, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(body))
	if tenant != "" {
		r.Header.Set("Authorization", "Bearer "+tenant)
	}
	r.Header.Set("Idempotency-Key", key)
	return r
}

func TestReadRequest(t *testing.T) {
	t.Parallel()
	a, err := peers.ReadRequest(request("ten_a", "k", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.NoError(t, err)
	require.Equal(t, "ten_a", a.TenantID)
	same, err := peers.ReadRequest(request("ten_a", "k", `{"payment_method":"pm_card_visa","currency":"usd","amount":2000}`))
	require.NoError(t, err)
	require.Equal(t, a.Fingerprint, same.Fingerprint, "the same payment, whatever the order of its fields")
	other, err := peers.ReadRequest(request("ten_a", "k", `{"amount":2500,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.NoError(t, err)
	require.NotEqual(t, a.Fingerprint, other.Fingerprint)

	for name, r := range map[string]*http.Request{
		"NoTenant": request("", "k", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`),
		"NoKey":    request("ten_a", "", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`),
		"NoAmount": request("ten_a", "k", `{"currency":"usd","payment_method":"pm_card_visa"}`),
		"Unknown":  request("ten_a", "k", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","tip":1}`),
		"NotJSON":  request("ten_a", "k", `amount=2000`),
	} {
		_, err := peers.ReadRequest(r)
		require.ErrorIs(t, err, peers.ErrBadRequest, name)
		require.Equal(t, http.StatusBadRequest, peers.StatusOf(err), name)
	}
}

func TestProviderKeyKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	require.Equal(t, peers.ProviderKey("ten_a", "k"), peers.ProviderKey("ten_a", "k"))
	require.NotEqual(t, peers.ProviderKey("ten_a", "k"), peers.ProviderKey("ten_b", "k"))
	require.NotEqual(t, peers.ProviderKey("ten_a", "bk"), peers.ProviderKey("ten_ab", "k"), "the parts are separated")
}

// TestPaymentsAnswersABadRequestItself: a request that cannot be read is a
// 400 before the peer sees it; a good one reaches the peer, read.
func TestPaymentsAnswersABadRequestItself(t *testing.T) {
	t.Parallel()
	var served []peers.Request
	h := peers.Payments(func(w http.ResponseWriter, _ *http.Request, req peers.Request) {
		served = append(served, req)
		w.WriteHeader(http.StatusAccepted)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, request("ten_a", "", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Empty(t, served)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, request("ten_a", "k", `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`))
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Len(t, served, 1)
	require.EqualValues(t, 2000, served[0].Amount)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/payments", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}
