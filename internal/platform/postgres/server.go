package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Server is the database server a connection found: its address (as the
// server itself sees it, so a pooler in between is seen through) and the
// timeline its WAL is on. A promotion starts a new timeline, so a
// failover shows even behind one address (a managed service's endpoint).
type Server struct {
	Addr     string
	Timeline int
}

func (s Server) String() string { return fmt.Sprintf("%s (timeline %d)", s.Addr, s.Timeline) }

// ServerWatch follows the servers a process's connections find: the one
// they are on now, and how many times that changed (the failovers the
// process rode without a restart), each logged. Give the same watch to
// every pool and connection of a process (PoolConfig.Watch).
type ServerWatch struct {
	logger *slog.Logger

	mu      sync.Mutex
	current Server
	moves   int64
}

// NewServerWatch returns a ServerWatch that logs to logger.
func NewServerWatch(logger *slog.Logger) *ServerWatch { return &ServerWatch{logger: logger} }

// Current is the server the newest connection found ("" before any) and
// how many times the server changed.
func (w *ServerWatch) Current() (Server, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current, w.moves
}

// Read is Current as the metrics read it.
func (w *ServerWatch) Read() (server string, timeline int, moves int64) {
	s, moves := w.Current()
	return s.Addr, s.Timeline, moves
}

// saw records that a new connection found s.
func (w *ServerWatch) saw(ctx context.Context, s Server) {
	w.mu.Lock()
	before := w.current
	moved := before != (Server{}) && s != before
	if moved {
		w.moves++
	}
	w.current = s
	w.mu.Unlock()
	switch {
	case before == (Server{}):
		w.logger.InfoContext(ctx, "database server", slog.String("server", s.Addr), slog.Int("timeline", s.Timeline))
	case moved:
		w.logger.WarnContext(ctx, "the database primary moved; connections follow it", slog.String("from", before.String()),
			slog.String("to", s.String()))
	}
}

// errReadOnlyServer is a connection's refusal of a server that takes no
// writes: pgconn then tries the URL's next host.
var errReadOnlyServer = errors.New("the server takes no writes (in recovery, or read-only)")

// identify proves, in one round trip, what server pgConn is on: whether
// it takes writes (refused if writable and it does not) and, for w, its
// address and timeline.
func identify(writable bool, w *ServerWatch) func(ctx context.Context, pgConn *pgconn.PgConn) error {
	return func(ctx context.Context, pgConn *pgconn.PgConn) error {
		results, err := pgConn.Exec(ctx, `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on',
			coalesce(host(inet_server_addr()) || ':' || inet_server_port(), ''),
			CASE WHEN pg_is_in_recovery() THEN 0 ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).ReadAll()
		if err != nil {
			return fmt.Errorf("identify the server: %w", err)
		}
		if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 3 {
			return errors.New("identify the server: no answer")
		}
		row := results[0].Rows[0]
		if writable && string(row[0]) == "t" {
			return errReadOnlyServer
		}
		if w != nil {
			addr := string(row[1])
			if addr == "" { // a Unix socket
				addr = pgConn.Conn().RemoteAddr().String()
			}
			timeline, _ := strconv.Atoi(string(row[2]))
			w.saw(ctx, Server{Addr: addr, Timeline: timeline})
		}
		return nil
	}
}
