package idempotency

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NotifyChannel is the PostgreSQL channel on which a key that leaves
// processing is announced, with the payload tenant_id + ":" + key. The
// notification is sent in the transaction that moves the key, so it is
// delivered when, and only if, that transaction commits.
//
// Only transitions out of processing notify, and only for a key a request
// waits for (Store.Await marks it awaited): a transaction that has notified
// serialises its commit, WAL flush included, with every other such
// transaction on a database-wide lock, which neither new keys nor the
// workers' completions may take on every operation.
const NotifyChannel = "idempotency_keys"

func notifyPayload(tenantID, key string) string { return tenantID + ":" + key }

// NotifierConfig configures a Notifier. Zero values take the documented
// defaults.
type NotifierConfig struct {
	// Connect opens the Notifier's own connection. Required; PoolConnector
	// makes one from a pool's settings.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Logger receives connection losses and reconnections. Required.
	Logger *slog.Logger
	// ReconnectMin is the wait before the first reconnection after the
	// connection failed; it doubles, with jitter, up to ReconnectMax.
	// Defaults to 100ms and 10s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// PingInterval is how long the connection may stay silent before it is
	// pinged, so a connection that died without a word (a network
	// partition) is noticed and replaced. Defaults to 30s.
	PingInterval time.Duration
}

// Notifier wakes Store.Await calls when their key leaves processing. It
// holds one dedicated connection per process that LISTENs on NotifyChannel,
// however many requests wait, and fans each notification out to the waiters
// of that key. Give it to the Store in Config.Notifier and start Run.
//
// While its connection is down, waiters are woken only by their fallback
// poll (Config.AwaitPoll); whenever it (re)starts listening, it wakes every
// waiter, since notifications sent in between are lost.
type Notifier struct {
	cfg NotifierConfig

	mu        sync.Mutex
	waiters   map[string]map[chan struct{}]struct{}
	listening bool
}

// NewNotifier returns a Notifier; it listens once Run is started.
func NewNotifier(cfg NotifierConfig) *Notifier {
	cfg.ReconnectMin = cmp.Or(cfg.ReconnectMin, 100*time.Millisecond)
	cfg.ReconnectMax = cmp.Or(cfg.ReconnectMax, 10*time.Second)
	cfg.PingInterval = cmp.Or(cfg.PingInterval, 30*time.Second)
	return &Notifier{cfg: cfg, waiters: map[string]map[chan struct{}]struct{}{}}
}

// PoolConnector returns a Connect function that opens connections with
// pool's settings but outside it: the listening connection is held for the
// life of the process, and taken from the pool it would be one fewer for
// requests.
func PoolConnector(pool *pgxpool.Pool) func(ctx context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	}
}

// Listening reports whether the Notifier is listening right now.
func (n *Notifier) Listening() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listening
}

// Run listens until ctx ends, reconnecting with backoff whenever the
// connection fails, and returns nil when ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	backoff := n.cfg.ReconnectMin
	for {
		err := n.listen(ctx, func() {
			backoff = n.cfg.ReconnectMin
		})
		if ctx.Err() != nil {
			return nil
		}
		// Jitter, so that every API process does not reconnect in the same
		// instant after a database restart.
		wait := backoff + time.Duration(rand.Int64N(int64(backoff)/5+1))
		n.cfg.Logger.WarnContext(ctx, "idempotency notifier lost its connection; waiters poll until it is back",
			slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, n.cfg.ReconnectMax)
	}
}

// listen connects, listens and delivers notifications until the connection
// fails or ctx ends. established is called once the LISTEN has taken effect.
func (n *Notifier) listen(ctx context.Context, established func()) error {
	conn, err := n.cfg.Connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	n.setListening(true)
	defer n.setListening(false)
	established()
	n.cfg.Logger.InfoContext(ctx, "idempotency notifier listening", slog.Uint64("pid", uint64(conn.PgConn().PID())))
	n.wakeAll()

	for {
		waitCtx, cancel := context.WithTimeout(ctx, n.cfg.PingInterval)
		note, err := conn.WaitForNotification(waitCtx)
		cancel()
		switch {
		case err == nil:
			n.wake(note.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case pgconn.Timeout(err):
			pingCtx, cancel := context.WithTimeout(ctx, n.cfg.PingInterval)
			err := conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

func (n *Notifier) setListening(v bool) {
	n.mu.Lock()
	n.listening = v
	n.mu.Unlock()
}

// subscribe registers a waiter for a key. The channel holds one wake-up, so
// one sent between the waiter's read of the key and its wait is kept.
func (n *Notifier) subscribe(tenantID, key string) (<-chan struct{}, func()) {
	payload := notifyPayload(tenantID, key)
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.waiters[payload] == nil {
		n.waiters[payload] = map[chan struct{}]struct{}{}
	}
	n.waiters[payload][ch] = struct{}{}
	n.mu.Unlock()
	return ch, func() {
		n.mu.Lock()
		delete(n.waiters[payload], ch)
		if len(n.waiters[payload]) == 0 {
			delete(n.waiters, payload)
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) wake(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.waiters[payload] {
		signal(ch)
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, set := range n.waiters {
		for ch := range set {
			signal(ch)
		}
	}
}

// signal never blocks: a waiter with a wake-up pending needs no second one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
