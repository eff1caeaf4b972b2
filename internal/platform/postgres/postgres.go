package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolMode says what a connection to the database URL is: a PostgreSQL
// session of its own, or a pooler's client that is lent a session one
// transaction at a time.
type PoolMode string

const (
	// SessionPooling: each connection is one PostgreSQL session for as long
	// as it is open (PostgreSQL itself, or a pooler in session mode).
	SessionPooling PoolMode = "session"
	// TransactionPooling: a pooler (PgBouncer's pool_mode = transaction)
	// lends a server session for one transaction, or one statement outside
	// a transaction, and may lend the client another for the next. Nothing
	// may outlive a transaction there: no named prepared statement, no
	// LISTEN, no session advisory lock, no SET outside a transaction.
	TransactionPooling PoolMode = "transaction"
)

// PoolConfig tunes the pool. Zero values take the documented defaults.
type PoolConfig struct {
	// URL is a libpq connection string or URL. Required.
	URL string
	// Mode is what a connection to URL is. Defaults to SessionPooling.
	Mode PoolMode
	// ConnectTimeout bounds establishing one connection, so that an
	// unreachable database fails requests promptly instead of hanging them.
	// Defaults to 3s.
	ConnectTimeout time.Duration
	// MaxConns caps open connections. Defaults to pgxpool's default
	// (the larger of 4 and the number of CPUs).
	MaxConns int32
	// Tracer, if set, sees every query (tracing).
	Tracer pgx.QueryTracer
	// KeepAlive is how long a connection may be silent before it is
	// probed, and between probes; three unanswered probes close it.
	// Defaults to DefaultKeepAlive.
	KeepAlive time.Duration
	// TCPUserTimeout is how long data sent on a connection may go
	// unacknowledged before it is closed (Linux). Defaults to
	// DefaultTCPUserTimeout.
	TCPUserTimeout time.Duration
	// Watch, if set, is told the server each new connection finds.
	Watch *ServerWatch
}

// Open parses the configuration and creates a pool. It does not wait for the
// database to be reachable: the API must start (and answer 503) without one.
func Open(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if err := configure(pcfg.ConnConfig, cfg); err != nil {
		return nil, err
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	pcfg.AfterRelease = writable
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("create pool: %w", err)
	}
	return pool, nil
}

// ConnConfig parses the configuration as Open does, for a connection
// outside any pool: one held for the life of the process, such as the one
// that LISTENs for the waiters of Prefer: wait. Connect with
// pgx.ConnectConfig(ctx, cfg.Copy()).
func ConnConfig(cfg PoolConfig) (*pgx.ConnConfig, error) {
	ccfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if err := configure(ccfg, cfg); err != nil {
		return nil, err
	}
	return ccfg, nil
}

func configure(ccfg *pgx.ConnConfig, cfg PoolConfig) error {
	ccfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 3*time.Second)
	ccfg.DialFunc = dialer(cfg).DialContext
	switch {
	case ccfg.ValidateConnect == nil && !strings.Contains(cfg.URL, "target_session_attrs"):
		// Only a server that accepts writes will do (failover.go).
		ccfg.ValidateConnect = identify(true, cfg.Watch)
	case cfg.Watch != nil:
		ccfg.AfterConnect = identify(false, cfg.Watch)
	}
	// Never a cancel request (cancel.go).
	ccfg.AfterNetConnect = holdConfig
	afterConnect := ccfg.AfterConnect
	ccfg.AfterConnect = func(ctx context.Context, pgConn *pgconn.PgConn) error {
		if afterConnect != nil {
			if err := afterConnect(ctx, pgConn); err != nil {
				return err
			}
		}
		withholdCancelRequests(pgConn)
		return nil
	}
	ccfg.Tracer = readOnlyGuard{next: cfg.Tracer}
	switch cfg.Mode {
	case "", SessionPooling:
	case TransactionPooling:
		// pgx names a prepared statement per query in the session it first
		// ran in, and the pooler may run the next execution in another
		// session, which has no such statement. Cached descriptions keep
		// the server's parameter types (a []byte for a jsonb column stays
		// JSON, as with prepared statements) while each execution parses
		// the unnamed statement again in its own round trip, which holds
		// in whatever session runs it.
		ccfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	default:
		return fmt.Errorf("pool mode %q is neither %q nor %q", cfg.Mode, SessionPooling, TransactionPooling)
	}
	return nil
}

// IsUnavailable reports whether err means the database could not be reached,
// the connection was lost or closed under the request, the server is out of
// resources or timed the statement out, or the transaction lost a transient
// conflict (lock timeout, deadlock), as opposed to the database rejecting a
// statement. Callers answer such errors with 503 and Retry-After: the
// transaction did not commit (or, if the commit's acknowledgement was lost,
// a retry with the same idempotency key replays it), so retrying is safe.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
		pgErr      *pgconn.PgError
	)
	switch {
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "57P04", "57P05":
			// Terminated by an administrator or a crash, starting up, the
			// database dropped, or idle_session_timeout.
			return true
		case "57014", "25P03":
			// A statement cancelled (statement_timeout, or a cancel request
			// sent when the context's deadline passed) or
			// idle_in_transaction_session_timeout.
			return true
		case "55P03", "40001", "40P01": // lock timeout, serialization failure, deadlock: transient
			return true
		case readOnlyTransaction:
			// The server is a standby now (a failover demoted it): the
			// connection is closed on its release, and the next finds the
			// primary.
			return true
		}
		// Class 08 is connection exceptions, class 53 insufficient
		// resources (too many connections, out of memory, disk full).
		return pgErr.Code[:2] == "08" || pgErr.Code[:2] == "53"
	case errors.As(err, &connectErr), errors.As(err, &netErr), pgconn.Timeout(err):
		return true
	case errors.Is(err, pgconn.ErrConnClosed):
		// A statement on a connection that pgx had already closed after
		// an earlier failure (the backend terminated, the socket lost).
		return true
	case pgconn.SafeToRetry(err):
		// Failed before anything was sent: the server never saw it.
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		// Includes waiting for a pool connection past the deadline.
		return true
	}
	return false
}

// LockTimeout is the lock_timeout setting for a wait of at most wait, for
// set_config('lock_timeout', …, true) at the head of a statement: at least
// a millisecond, since 0 would mean no bound at all.
func LockTimeout(wait time.Duration) string {
	return fmt.Sprintf("%dms", max(wait.Milliseconds(), 1))
}
