package pgtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StatementLog records what a pool sends to the server, one entry per round
// trip: a query, an Exec (BEGIN and COMMIT included) or a whole batch, for
// tests that pin how often a path talks to the database.
type StatementLog struct {
	mu   sync.Mutex
	sent []string
}

// TracedPool opens a pool on dbURL whose round trips log records, closed
// when the test ends.
func TracedPool(tb testing.TB, dbURL string) (*pgxpool.Pool, *StatementLog) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		tb.Fatalf("pgtest: parse %s: %v", dbURL, err)
	}
	log := &StatementLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, log
}

func (l *StatementLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, strings.Join(strings.Fields(s), " "))
}

// Take returns the round trips recorded since the last Take.
func (l *StatementLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sent
	l.sent = nil
	return out
}

// TraceQueryStart implements pgx.QueryTracer.
func (l *StatementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.add(data.SQL)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (l *StatementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart implements pgx.BatchTracer.
func (l *StatementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	parts := make([]string, 0, len(data.Batch.QueuedQueries))
	for _, q := range data.Batch.QueuedQueries {
		parts = append(parts, q.SQL)
	}
	l.add("batch: " + strings.Join(parts, " | "))
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (l *StatementLog) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (l *StatementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
