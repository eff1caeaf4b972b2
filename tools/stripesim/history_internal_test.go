package stripesim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkChargeAfterHistory charges a payment intent on a simulator that
// already holds many settled ones, and reports the time per charge as a
// ratio to the same on an empty simulator measured in the same run: near
// 1, a request's work does not grow with what the simulator has charged
// before (a load run leaves hundreds of thousands of intents behind).
func BenchmarkChargeAfterHistory(b *testing.B) {
	var emptyPerOp float64
	for _, held := range []int{0, 100_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			sim := New(Config{SearchIndexDelay: -1})
			now := time.Now()
			for i := range held {
				id := fmt.Sprintf("pi_history_%d", i)
				sim.st.intents[id] = &intent{id: id, seq: sim.st.nextSeq(), created: now.Unix(), createdAt: now,
					amount: 1500, currency: "usd", paymentMethod: "pm_card_visa", status: statusSucceeded, amountReceived: 1500}
			}
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/payment_intents",
					strings.NewReader("amount=1500&currency=usd&payment_method=pm_card_visa&confirm=true"))
				req.Header.Set("Authorization", "Bearer sk_test_history")
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				rec := httptest.NewRecorder()
				sim.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if held == 0 {
				emptyPerOp = perOp
				return
			}
			b.ReportMetric(perOp/emptyPerOp, "x-empty")
		})
	}
}
