package peers

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config is what every peer takes.
type Config struct {
	// DatabaseURL is the peer's database (DATABASE_URL). Required.
	DatabaseURL string
	// StripeSecretKey authenticates to the provider (STRIPE_SECRET_KEY).
	// Defaults to sk_test_peers, which the simulator takes.
	StripeSecretKey string
	// StripeAPIBase points the provider client at the simulator
	// (STRIPE_API_BASE). Empty means Stripe itself.
	StripeAPIBase string
	// Addr is where the HTTP server listens (-addr). Defaults to
	// 127.0.0.1:0, a free port.
	Addr string
	// Concurrency is how many charges run at once (-concurrency): the
	// queue's workers. Defaults to 100, as oncepay's WORKER_CONCURRENCY.
	Concurrency int
	// MaxConns is the pool's size (-max-conns). Defaults to 30: as many as
	// oncepay's API and worker hold together at their defaults (10 and 20).
	MaxConns int
	// Logger receives what goes wrong. Defaults to discarding.
	Logger *slog.Logger
}

// WithDefaults fills what is unset.
func (c Config) WithDefaults() Config {
	c.StripeSecretKey = cmp.Or(c.StripeSecretKey, "sk_test_peers")
	c.Addr = cmp.Or(c.Addr, "127.0.0.1:0")
	c.Concurrency = cmp.Or(c.Concurrency, 100)
	c.MaxConns = cmp.Or(c.MaxConns, 30)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	if c.DatabaseURL == "" {
		return errors.New("DATABASE_URL is required")
	}
	if c.Concurrency < 1 || c.MaxConns < 2 {
		return errors.New("-concurrency must be positive and -max-conns at least 2")
	}
	return nil
}

// RegisterFlags reads the environment's settings into c and registers the
// flags every peer takes on flags.
func (c *Config) RegisterFlags(flags *flag.FlagSet, getenv func(string) string) {
	c.DatabaseURL, c.StripeSecretKey, c.StripeAPIBase = getenv("DATABASE_URL"), getenv("STRIPE_SECRET_KEY"), getenv("STRIPE_API_BASE")
	flags.StringVar(&c.Addr, "addr", "127.0.0.1:0", "where to listen")
	flags.IntVar(&c.Concurrency, "concurrency", 100, "charges at once (the queue's workers)")
	flags.IntVar(&c.MaxConns, "max-conns", 30, "the pool's size (oncepay's API and worker together hold 30)")
}

// NewPool opens the peer's pool.
func NewPool(ctx context.Context, c Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(c.MaxConns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return pool, nil
}

// Serve serves h on c.Addr until ctx ends, once it listens printing
// "NAME listening ADDR" to stdout: the bench starts a peer on a free port
// and reads where it went.
func Serve(ctx context.Context, name string, c Config, h http.Handler, stdout io.Writer) error {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(stdout, name, "listening", ln.Addr())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Server is a running peer: its HTTP handler, and Close to stop it.
type Server interface {
	Handler() http.Handler
	Close() error
}

// Main is a peer command's: it reads the flags every peer takes into c (and
// a peer's own, with more), then starts the peer and serves it until ctx
// ends. -h prints the flags and starts nothing.
func Main(ctx context.Context, name string, args []string, getenv func(string) string, stdout io.Writer, c *Config,
	more func(*flag.FlagSet), start func(context.Context) (Server, error)) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	c.RegisterFlags(flags, getenv)
	if more != nil {
		more(flags)
	}
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := start(ctx)
	if err != nil {
		return err
	}
	serveErr := Serve(ctx, name, *c, s.Handler(), stdout)
	return errors.Join(serveErr, s.Close())
}
