// Command baseline serves the bench's bare new-key baseline
// (tools/bench/baseline) until SIGINT or SIGTERM:
//
//	DATABASE_URL=… baseline -addr 127.0.0.1:0 -tenants opk_…=ten_…,opk_…=ten_…
//
// It prints "baseline listening ADDR" once it serves. The bench starts it;
// it is not a service.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/tools/bench/baseline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	addr := flags.String("addr", "127.0.0.1:0", "where to listen")
	list := flags.String("tenants", "", "API key=tenant id pairs, comma-separated")
	conns := flags.Int("conns", 10, "pool size (the API's DATABASE_MAX_CONNS default)")
	if err := flags.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	tenants := map[string]string{}
	for _, pair := range strings.Split(*list, ",") {
		key, tenant, ok := strings.Cut(pair, "=")
		if !ok || key == "" || tenant == "" {
			return fmt.Errorf("-tenants: %q is not key=tenant", pair)
		}
		tenants[key] = tenant
	}
	pcfg, err := pgxpool.ParseConfig(getenv("DATABASE_URL"))
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	pcfg.MaxConns = int32(*conns)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: baseline.Handler(pool, tenants), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(stdout, "baseline listening", ln.Addr())
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
