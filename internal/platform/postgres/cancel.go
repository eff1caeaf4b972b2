package postgres

import (
	"context"
	"errors"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// No connection of oncepay's ever sends a cancel request.
//
// pgx sends one whenever it gives a connection up in the middle of a
// statement (a context's deadline passed, a read failed), before closing
// it. A COMMIT waiting for its synchronous standby stops waiting when it is
// cancelled, and the transaction it ends becomes visible on the primary
// although no standby has it: a retry then reads the key's row there and
// replays it, so a client holds an acknowledgement of a commit that the
// standby never received. If that primary is then demoted (a switchover,
// or a failover away from a primary cut off from its standby), the commit
// is gone, and the key's next retry makes a second payment. Seen in a chaos
// run: one acknowledged payment lost in a switchover.
//
// Without the cancel, the commit's wait ends only when the standby has the
// commit or the server ends the session (a shutdown, a demotion), and
// until then its row stays locked: a retry waits for it, or is told to come
// back later, and never replays it early. A statement abandoned for any
// other reason runs on until it ends or its next write to the closed
// connection fails; every statement here is short, and lock waits are
// bounded by lock_timeout.

// errCancelWithheld is a cancel request's dial, refused.
var errCancelWithheld = errors.New("postgres: cancel request withheld: cancelling a commit's wait for its synchronous standby would acknowledge what the standby lacks")

// connectedConn is a connection being set up, holding the configuration
// it was dialed with: pgx dials with that configuration again only to
// send a cancel request.
type connectedConn struct {
	net.Conn
	config *pgconn.Config
}

// holdConfig is every connection's AfterNetConnect. Each connection has a
// configuration of its own (pgx copies it for each), which the connection's
// cancel requests dial with.
func holdConfig(_ context.Context, config *pgconn.Config, conn net.Conn) (net.Conn, error) {
	return &connectedConn{Conn: conn, config: config}, nil
}

// withholdCancelRequests, run once a connection is set up (its
// AfterConnect), makes every later dial of its configuration (a cancel
// request's) fail. Dials before then are the connection's own attempts
// (another host, another TLS mode), which go on as configured.
func withholdCancelRequests(pgConn *pgconn.PgConn) {
	if c, ok := pgConn.Conn().(*connectedConn); ok {
		c.config.DialFunc = func(context.Context, string, string) (net.Conn, error) { return nil, errCancelWithheld }
	}
}
