package postgres

import (
	"cmp"
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A database that fails over moves its primary: the server a connection
// was opened to dies, or comes back as a read-only standby, and a standby
// elsewhere is promoted. A connection must notice both by itself, and a
// pool must never lend one again that can no longer write:
//
//   - a dead peer is noticed in seconds, by TCP keepalives on an idle
//     connection and a TCP user timeout on one waiting for its data to be
//     acknowledged, instead of the kernel's default of many minutes;
//   - a new connection proves that its server accepts writes (libpq's
//     target_session_attrs=read-write, the default here when the URL sets
//     none), so a multi-host URL finds the primary and a single host that
//     came back as a standby is refused, not used;
//   - a connection whose server answered "read-only transaction"
//     (SQLSTATE 25006), or reports that it is in recovery or read-only, is
//     closed on its release, never lent again.

// Defaults for the TCP settings of every connection.
const (
	// DefaultKeepAlive: an idle connection is probed after 5 s of silence
	// and every 5 s after that, and given up after 3 unanswered probes:
	// a dead server is noticed within about 20 s, where the kernel's
	// defaults would take over two hours.
	DefaultKeepAlive = 5 * time.Second
	// DefaultTCPUserTimeout: data sent and not acknowledged for 15 s
	// closes the connection, where the kernel retransmits for about 15
	// minutes (tcp_retries2). Longer than any acknowledgement a live
	// server on a slow network takes, shorter than a client's patience.
	DefaultTCPUserTimeout = 15 * time.Second
	keepAliveProbes       = 3
)

// readOnlyTransaction is SQLSTATE 25006, read_only_sql_transaction: the server is
// a standby, or was made read-only.
const readOnlyTransaction = "25006"

// IsReadOnly reports whether err is a server's refusal to write: the
// connection is on a standby, or on a primary made read-only.
func IsReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == readOnlyTransaction
}

// dialer is the net.Dialer of every connection: keepalives, and the TCP
// user timeout where the platform has one (setUserTimeout).
func dialer(cfg PoolConfig) *net.Dialer {
	keepAlive := cmp.Or(cfg.KeepAlive, DefaultKeepAlive)
	userTimeout := cmp.Or(cfg.TCPUserTimeout, DefaultTCPUserTimeout)
	return &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAlive, Interval: keepAlive, Count: keepAliveProbes},
		Control:         setUserTimeout(userTimeout),
	}
}

// writable is the pool's AfterRelease: false, and the connection closed,
// for one whose server refused a write or says it is read-only now (a
// server reports both parameters as they change, with no round trip).
func writable(conn *pgx.Conn) bool {
	pc := conn.PgConn()
	refused, _ := pc.CustomData()[refusedWrite].(bool)
	return !refused && pc.ParameterStatus("in_hot_standby") != "on" && pc.ParameterStatus("default_transaction_read_only") != "on"
}

// refusedWrite marks, in a connection's CustomData, that its server
// answered 25006.
const refusedWrite = "oncepay.refused_write"

// readOnlyGuard marks a connection whose statement was refused as
// read-only, then hands every trace on to next (if set).
type readOnlyGuard struct{ next pgx.QueryTracer }

func markRefused(conn *pgx.Conn, err error) {
	if conn != nil && IsReadOnly(err) {
		conn.PgConn().CustomData()[refusedWrite] = true
	}
}

func (g readOnlyGuard) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if g.next == nil {
		return ctx
	}
	return g.next.TraceQueryStart(ctx, conn, data)
}

func (g readOnlyGuard) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	markRefused(conn, data.Err)
	if g.next != nil {
		g.next.TraceQueryEnd(ctx, conn, data)
	}
}

func (g readOnlyGuard) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if t, ok := g.next.(pgx.BatchTracer); ok {
		return t.TraceBatchStart(ctx, conn, data)
	}
	return ctx
}

func (g readOnlyGuard) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	markRefused(conn, data.Err)
	if t, ok := g.next.(pgx.BatchTracer); ok {
		t.TraceBatchQuery(ctx, conn, data)
	}
}

func (g readOnlyGuard) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	markRefused(conn, data.Err)
	if t, ok := g.next.(pgx.BatchTracer); ok {
		t.TraceBatchEnd(ctx, conn, data)
	}
}

func (g readOnlyGuard) TraceConnectStart(ctx context.Context, data pgx.TraceConnectStartData) context.Context {
	if t, ok := g.next.(pgx.ConnectTracer); ok {
		return t.TraceConnectStart(ctx, data)
	}
	return ctx
}

func (g readOnlyGuard) TraceConnectEnd(ctx context.Context, data pgx.TraceConnectEndData) {
	if t, ok := g.next.(pgx.ConnectTracer); ok {
		t.TraceConnectEnd(ctx, data)
	}
}

func (g readOnlyGuard) TracePrepareStart(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareStartData) context.Context {
	if t, ok := g.next.(pgx.PrepareTracer); ok {
		return t.TracePrepareStart(ctx, conn, data)
	}
	return ctx
}

func (g readOnlyGuard) TracePrepareEnd(ctx context.Context, conn *pgx.Conn, data pgx.TracePrepareEndData) {
	markRefused(conn, data.Err)
	if t, ok := g.next.(pgx.PrepareTracer); ok {
		t.TracePrepareEnd(ctx, conn, data)
	}
}

func (g readOnlyGuard) TraceCopyFromStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	if t, ok := g.next.(pgx.CopyFromTracer); ok {
		return t.TraceCopyFromStart(ctx, conn, data)
	}
	return ctx
}

func (g readOnlyGuard) TraceCopyFromEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceCopyFromEndData) {
	markRefused(conn, data.Err)
	if t, ok := g.next.(pgx.CopyFromTracer); ok {
		t.TraceCopyFromEnd(ctx, conn, data)
	}
}
