// Package serve holds what every oncepay binary does the same way: its
// JSON logger, and serving HTTP until its context ends, then shutting down
// gracefully.
package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/platform/logctx"
)

// NewLogger returns a JSON logger on w at level ("debug", "info", "warn",
// "error"; anything else is info). Binaries validate the level beforehand.
// Its lines carry the attributes of their context (logctx.With): the
// request id in the API, the job id and kind in the worker.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(logctx.NewHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

// Default server timeouts, which SetLimits gives the fields left zero.
// Without them a client that sends its header and then one byte of body, or
// nothing at all, holds a connection (and a goroutine) forever.
const (
	// DefaultReadHeaderTimeout bounds reading a request's header.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included,
	// from its first byte; bodies are at most 16 KiB. net/http lifts the
	// read deadline once the body has been read, so it does not limit how
	// long a handler may take to answer.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds the time from the end of a request's
	// header to the end of its response. It must outlast the longest
	// answer: Prefer: wait holds one up to idempotency.MaxWait (30s) after
	// authentication, the key's lock wait and the transaction (12s with
	// the API's defaults).
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection that has carried
	// no request for this long. It is longer than the usual load balancer
	// idle timeout (60s), so that the balancer, not the server, closes
	// first and never sends a request down a connection being closed.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds a request's line and header. net/http's
	// own bound is 1 MiB, which lets anyone without a key send a 1 MiB
	// method or path into every log line and problem answer about it; no
	// request of ours needs more than a few KiB.
	DefaultMaxHeaderBytes = 64 << 10
)

// SetLimits gives each of srv's timeouts and its header limit left zero
// its default, and returns srv.
func SetLimits(srv *http.Server) *http.Server {
	srv.MaxHeaderBytes = cmp.Or(srv.MaxHeaderBytes, DefaultMaxHeaderBytes)
	srv.ReadHeaderTimeout = cmp.Or(srv.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	srv.ReadTimeout = cmp.Or(srv.ReadTimeout, DefaultReadTimeout)
	srv.WriteTimeout = cmp.Or(srv.WriteTimeout, DefaultWriteTimeout)
	srv.IdleTimeout = cmp.Or(srv.IdleTimeout, DefaultIdleTimeout)
	return srv
}

// HTTP serves srv on ln until ctx ends, then shuts down, giving in-flight
// requests up to shutdownTimeout. Timeouts left zero take their defaults
// (SetLimits). It logs "<name> listening" with the bound address (tests
// start binaries on port 0 and read it from there).
func HTTP(ctx context.Context, name string, srv *http.Server, ln net.Listener, shutdownTimeout time.Duration, logger *slog.Logger) error {
	SetLimits(srv)
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

// ParseNoArgs reads the arguments of a binary configured only by its
// environment (args holds the program name first): none, or a request for
// help. Anything else is a usage error naming it, so a typo in a
// deployment's command fails at start instead of being ignored.
func ParseNoArgs(args []string) (help bool, err error) {
	for _, a := range args[min(1, len(args)):] {
		switch a {
		case "-h", "-help", "--help", "help":
			return true, nil
		default:
			return false, Usage(fmt.Errorf("unexpected argument %q: this program takes none (it is configured by environment variables; --help lists them)", a))
		}
	}
	return false, nil
}

// ExitUsage is the exit status of a command given arguments it does not
// take, as the shell's own commands use: a script can tell a mistake in
// its call (2) from a failure of the command (1).
const ExitUsage = 2

// ExitError is an error that asks for an exit status other than 1: a
// command's own (ledger check's findings), or ExitUsage (Usage).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Usage is err, a command's refusal of its arguments: it exits ExitUsage.
func Usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// ExitCode is the exit status a command ends with after err: an
// ExitError's code, 1 for any other error, 0 for none.
func ExitCode(err error) int {
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	default:
		return 1
	}
}

// HealthcheckTimeout bounds the healthcheck commands' one request: well
// under the interval of any orchestrator's probe.
const HealthcheckTimeout = 3 * time.Second

// Healthcheck asks the server listening on addr (a listen address as
// configured; an unspecified host such as 0.0.0.0 means this machine) for
// /readyz, and returns nil if it answers 200 within timeout. It is the
// healthcheck command of images that have no curl.
func Healthcheck(ctx context.Context, addr string, timeout time.Duration) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("healthcheck: address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		// A server on every interface is on the loopback one too (an IPv6
		// wildcard listener takes IPv4 as well).
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/readyz"
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	// No proxy from the environment: the server is on this machine.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s answered %s", url, resp.Status)
	}
	return nil
}
