package api_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/payouts"
)

// TestARouteMountedTwiceIsRefusedAtStart: a kind registered twice, or a
// service's own route on a kind's path, stops the API at start naming
// both; chi alone would let the second silently replace the first.
func TestARouteMountedTwiceIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	require.NotPanics(t, func() {
		api.NewHandler(api.Deps{Kinds: kinds.All(), Logger: logger, Keys: idempotency.NewStore(idempotency.Config{})})
	})

	twice := append(kinds.All(), payouts.Kind())
	require.ErrorContains(t, panicked(func() { api.NewHandler(api.Deps{Kinds: twice, Logger: logger}) }),
		"POST /v1/payouts is mounted by the payout kind (registry entry 5) and by the payout kind (registry entry 6): give one another path")

	mine := func(r chi.Router, _ api.Deps) {
		r.Post("/refunds/{id}/notes", func(http.ResponseWriter, *http.Request) {})
		r.Get("/payments/{id}", func(http.ResponseWriter, *http.Request) {})
	}
	err := panicked(func() { api.NewHandler(api.Deps{Kinds: kinds.All(), Logger: logger, MoreV1Routes: mine}) })
	require.EqualError(t, err, "GET /v1/payments/{id} is mounted by the payment kind (registry entry 1) and by the service's own routes (MoreV1Routes): give one another path")
}

// panicked is the error f panicked with, nil if it did not.
func panicked(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err, _ = v.(error)
		}
	}()
	f()
	return nil
}
