package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Acquirer lends connections: a pool.
type Acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// beginReadCommitted begins every transaction of InTx. The service's
// transactions are read committed, whatever the server's default: after a
// conflicting insert or a lock wait, the next statement must see the row
// the other transaction committed.
const beginReadCommitted = "begin isolation level read committed"

// pipelinedTx is a transaction whose BEGIN travels with its first statement
// and whose COMMIT may travel with its last writes (SendAndCommit), so that
// neither costs a network round trip of its own. On a connection that is
// not idle when returned (a transaction left open by a failure), the pool
// closes it.
type pipelinedTx struct {
	conn *pgx.Conn
	// begun: BEGIN was sent; ended: COMMIT or ROLLBACK was.
	begun, ended bool
	// objects are pgx's large objects over this transaction, once asked
	// for (LargeObjects).
	objects *pgx.LargeObjects
}

var errNested = errors.New("a pipelined transaction does not nest transactions")

// InTx runs fn in a read committed transaction on a connection of pool,
// pipelined: its BEGIN goes with fn's first statement, and its COMMIT with
// fn's last writes if fn sends them with SendAndCommit, or alone after fn
// returns. An error or a panic rolls it back. fn must not begin a nested
// transaction (a savepoint).
func InTx(ctx context.Context, pool Acquirer, fn func(pgx.Tx) error) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	defer conn.Release()
	tx := &pipelinedTx{conn: conn.Conn()}
	defer func() {
		if !tx.ended {
			// Rolled back even when ctx is done: a connection returned in
			// a transaction is closed by the pool, but one rolled back is
			// kept.
			rollbackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = tx.Rollback(rollbackCtx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Query runs a query; the first statement carries BEGIN with it.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended {
		return nil, pgx.ErrTxClosed
	}
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	results := t.SendBatch(ctx, one(sql, args))
	rows, err := results.Query()
	if err != nil {
		_ = results.Close() // its error is err
		return nil, err
	}
	return &batchRows{Rows: rows, results: results}, nil
}

func one(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return b
}

// batchRows are the rows of a batch's last query: closing them closes the
// batch, whose error they then report.
type batchRows struct {
	pgx.Rows
	results pgx.BatchResults
	err     error
	closed  bool
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.results.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

// QueryRow runs a query for one row; the first statement carries BEGIN
// with it.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.begun && !t.ended {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return firstRow{rows: rows, err: err}
}

// firstRow is the row of a query sent with BEGIN (or the error that kept
// it from running), scanned as pgx scans a row.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// Exec runs a statement; the first statement carries BEGIN with it.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if t.begun {
		return t.conn.Exec(ctx, sql, args...)
	}
	results := t.SendBatch(ctx, one(sql, args))
	tag, err := results.Exec()
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}

// SendBatch sends a batch; the first carries BEGIN with it.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.ended {
		return failedBatch{pgx.ErrTxClosed}
	}
	if !t.begun {
		t.begun = true
		begin := &pgx.Batch{}
		begin.Queue(beginReadCommitted)
		b.QueuedQueries = append(begin.QueuedQueries, b.QueuedQueries...)
		results := t.conn.SendBatch(ctx, b)
		if _, err := results.Exec(); err != nil {
			return failedBatch{errors.Join(err, results.Close())}
		}
		return results
	}
	return t.conn.SendBatch(ctx, b)
}

// SendAndCommit sends b, the transaction's last statements, and in an
// InTx transaction its COMMIT with them, in one round trip; in another
// transaction it sends b alone and leaves the commit to its owner. The
// server runs the COMMIT before any of b's callbacks: a statement that must
// roll the transaction back has to fail in the server, not in its callback.
func SendAndCommit(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if p, ok := tx.(*pipelinedTx); ok {
		return p.commitWith(ctx, b)
	}
	return tx.SendBatch(ctx, b).Close()
}

func (t *pipelinedTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	var committed pgconn.CommandTag
	b.Queue("commit").Exec(func(tag pgconn.CommandTag) error {
		committed = tag
		return nil
	})
	if err := t.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	t.ended = true
	if committed.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Commit commits, unless commitWith already did.
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if t.ended {
		return nil
	}
	t.ended = true
	if !t.begun {
		return nil
	}
	tag, err := t.conn.Exec(ctx, "commit")
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back a transaction still open.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	if !t.begun {
		return nil
	}
	_, err := t.conn.Exec(ctx, "rollback")
	return err
}

func (t *pipelinedTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNested }

func (t *pipelinedTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if _, err := t.Exec(ctx, "select"); err != nil { // begins, if not yet
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// LargeObjects are pgx's, which it builds only over a transaction of its
// own: the first call begins one on this connection, in this transaction.
// Before the first statement, that BEGIN is this transaction's (a round
// trip of its own); after it, the server only warns that a transaction is
// in progress. Either way the large objects run in this transaction, and
// its COMMIT or ROLLBACK ends them. Asked for once the transaction ended,
// or on a connection that cannot take the BEGIN, there are none to give:
// the panic says why, where pgx's own would fail each call.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects {
	if t.objects != nil {
		return *t.objects
	}
	if t.ended {
		panic(fmt.Errorf("large objects of an ended transaction: %w", pgx.ErrTxClosed))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	own, err := t.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		panic(fmt.Errorf("begin the large objects' transaction: %w", err))
	}
	t.begun = true
	objects := own.LargeObjects()
	t.objects = &objects
	return objects
}

func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

func (t *pipelinedTx) Conn() *pgx.Conn { return t.conn }

// failedBatch is a batch that was not sent, or whose BEGIN failed.
type failedBatch struct{ err error }

func (b failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b failedBatch) QueryRow() pgx.Row                { return firstRow{err: b.err} }
func (b failedBatch) Close() error                     { return b.err }
func (b failedBatch) Tx() pgx.Tx                       { return nil }
