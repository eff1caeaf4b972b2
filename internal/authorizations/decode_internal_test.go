package authorizations

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

// FuzzDecode: whatever body a capture or a cancel arrives with, decode
// never panics; it either refuses with a problem (400, 413, 415) or
// returns a request within the rules.
func FuzzDecode(f *testing.F) {
	for _, body := range []string{``, `{}`, `{"amount_to_capture": 1500}`, `{"amount_to_capture": 0}`, `{"amount_to_capture": 1e3}`,
		`{"cancellation_reason": "duplicate"}`, `{"cancellation_reason": "bored"}`, `{"amount_to_capture": null}`, `[]`, `{"x": 1}`} {
		f.Add([]byte(body), true)
		f.Add([]byte(body), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, capture bool) {
		kind := Cancel
		if capture {
			kind = Capture
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/payments/pay_01M00000000000000000000000/"+string(kind), bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		route := chi.NewRouteContext()
		route.URLParams.Add("id", "pay_01M00000000000000000000000")
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, route))
		req, err := decode(httptest.NewRecorder(), r, kind)
		if err != nil {
			var pe *problem.Error
			if !errors.As(err, &pe) || pe.Type.Status < 400 || pe.Type.Status >= 500 {
				t.Fatalf("refused with %v, not a client problem", err)
			}
			return
		}
		if req.AmountToCapture < 0 || req.AmountToCapture > 99_999_999 || (kind == Cancel && req.AmountToCapture != 0) {
			t.Fatalf("accepted %+v", req)
		}
	})
}
