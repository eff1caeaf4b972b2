package stripesim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// call sends a Stripe API request straight to the handler.
func call(t *testing.T, sim *Server, method, path, form string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(form))
	req.Header.Set("Authorization", "Bearer sk_test_settler")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	sim.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec
}

func (s *Server) isSettling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settling
}

// TestSettlerEnds: the settler runs only while a payout is on its way, and
// Close ends it even when the clock never reaches the next step, after
// which a request still settles what is due.
func TestSettlerEnds(t *testing.T) {
	t.Parallel()

	t.Run("WhenEveryPayoutSettled", func(t *testing.T) {
		t.Parallel()
		sim := New(Config{PayoutTransitDelay: 10 * time.Millisecond, PayoutPaidDelay: 10 * time.Millisecond})
		t.Cleanup(sim.Close)
		require.False(t, sim.isSettling(), "no payout, no settler")
		call(t, sim, http.MethodPost, "/v1/payment_intents", "amount=5000&currency=usd&payment_method=pm_card_visa&confirm=true")
		call(t, sim, http.MethodPost, "/v1/payouts", "amount=1000&currency=usd")
		require.True(t, sim.isSettling())
		require.Eventually(t, func() bool { return !sim.isSettling() }, 5*time.Second, 5*time.Millisecond)
		sim.mu.Lock()
		defer sim.mu.Unlock()
		require.Empty(t, sim.st.unsettled)
	})

	t.Run("AtClose", func(t *testing.T) {
		t.Parallel()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		sim := New(Config{Now: func() time.Time { return now }})
		call(t, sim, http.MethodPost, "/v1/payment_intents", "amount=5000&currency=usd&payment_method=pm_card_visa&confirm=true")
		call(t, sim, http.MethodPost, "/v1/payouts", "amount=1000&currency=usd")
		require.True(t, sim.isSettling())
		sim.Close() // returns once the settler has ended
		require.False(t, sim.isSettling())

		sim.mu.Lock()
		sim.clockAhead = time.Hour
		sim.mu.Unlock()
		rec := call(t, sim, http.MethodGet, "/v1/payouts", "")
		require.Contains(t, rec.Body.String(), `"status":"paid"`, "the request settled it")
		require.False(t, sim.isSettling(), "none started after Close")
	})
}
