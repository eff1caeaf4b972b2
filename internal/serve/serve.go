// Package serve holds what every oncepay binary does the same way: its
// JSON logger, and serving HTTP until its context ends, then shutting down
// gracefully.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// NewLogger returns a JSON logger on w at level ("debug", "info", "warn",
// "error"; anything else is info). Binaries validate the level beforehand.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// HTTP serves srv on ln until ctx ends, then shuts down, giving in-flight
// requests up to shutdownTimeout. It logs "<name> listening" with the bound
// address (tests start binaries on port 0 and read it from there).
func HTTP(ctx context.Context, name string, srv *http.Server, ln net.Listener, shutdownTimeout time.Duration, logger *slog.Logger) error {
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = 10 * time.Second
	}
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	}
	logger.InfoContext(ctx, name+" listening", slog.String("addr", ln.Addr().String()))

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.InfoContext(ctx, name+" shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Pinger is what readiness checks: a pool.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Healthz answers 200 while the process is up.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// Readyz answers 200 only if the database answers within a second: a load
// balancer or orchestrator should stop sending work to an instance that
// would fail it closed.
func Readyz(db Pinger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := db.Ping(ctx); err != nil {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"unavailable","database":"unreachable"}` + "\n"))
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok","database":"ok"}` + "\n"))
	}
}
