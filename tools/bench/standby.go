package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/tools/devstack"
	"github.com/oncepay/oncepay/tools/stripesim"
)

// StandbyRound is one round of the standby phase: the same closed loop of
// new keys, worker running, on the bench's single server and on a
// formation whose every commit waits for its synchronous standby, and
// pgbench's new-key write set on each.
type StandbyRound struct {
	Single        SettledRound  `json:"single"`
	Standby       SettledRound  `json:"standby"`
	SingleGolden  PgbenchResult `json:"single_golden"`
	StandbyGolden PgbenchResult `json:"standby_golden"`
}

// standby measures what synchronous replication costs: a second stack runs
// on a pg_auto_failover formation of its own on this machine (durable, its
// standby synchronous, as docs/operations.md asks of a deployment), and
// each round runs the settled-payments loop and golden.sql on the single
// server and on the formation in turn. Every commit on the formation waits
// for the standby to flush it, so a payment's commits are what it pays
// for: pgbench's ratio is the database's price alone.
func (r *run) standby(ctx context.Context) (_ *PhaseResult, err error) {
	stateDir := filepath.Join(r.cfg.StateDir, "standby")
	if err := os.RemoveAll(stateDir); err != nil {
		return nil, err
	}
	addrs, err := devstack.FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	r.printf("starting a pg_auto_failover formation (a monitor, a primary and a synchronous standby) and a stack on it (logs in %s/logs)", stateDir)
	stack, err := devstack.Start(ctx, devstack.Config{
		// One standby: the price of a commit waiting for a standby, which
		// two (each commit waiting for either) do not change but would
		// share this machine's cores with a third server.
		BinDir: r.cfg.BinDir, StateDir: stateDir, HA: true, Standbys: 1,
		StripeSecretKey: benchSecretKey, StripeAPIBase: "http://" + addrs[0],
		APIAddr: addrs[1], WorkerAdminAddr: addrs[2], Env: stackEnv(),
	})
	if errors.Is(err, hapg.ErrNotInstalled) {
		// The phases before keep their results.
		r.printf("skipped: %v", err)
		return &PhaseResult{Notes: map[string]any{"skipped": err.Error()}}, nil
	}
	if err != nil {
		return nil, err
	}
	// The formation's data goes with it: the bench leaves nothing behind.
	formationDir := stack.FormationDir // Stop forgets it
	defer func() {
		if stopErr := stack.Stop(context.WithoutCancel(ctx)); stopErr != nil {
			r.cfg.Logger.WarnContext(ctx, "stop the standby's stack", slog.Any("error", stopErr))
		} else if rmErr := os.RemoveAll(formationDir); rmErr != nil {
			r.cfg.Logger.WarnContext(ctx, "remove the formation", slog.Any("error", rmErr))
		}
	}()
	pool, err := pgxpool.New(ctx, stack.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	onStandby := &run{cfg: r.cfg, stack: stack, pool: pool, sim: stripesim.AdminClient{BaseURL: stack.SimURL},
		pgbench: pgbench{path: r.pgbench.path, dbURL: stack.DatabaseURL, scriptDir: r.cfg.ScriptDir},
		client:  r.client, maxConnections: r.maxConnections, helpers: map[string]*helperProcess{}}
	if err := onStandby.setup(ctx); err != nil {
		return nil, err
	}

	single, synced := r.newKeyRequest(r.stack.APIURL, 0, nil), onStandby.newKeyRequest(stack.APIURL, 0, nil)
	r.warmUp(ctx, single)
	onStandby.warmUp(ctx, synced)
	var rounds []StandbyRound
	for i := range r.cfg.Rounds {
		var rd StandbyRound
		if rd.Single, err = r.settledRound(ctx, single); err != nil {
			return nil, err
		}
		if rd.Standby, err = onStandby.settledRound(ctx, synced); err != nil {
			return nil, fmt.Errorf("on the formation: %w", err)
		}
		if rd.SingleGolden, err = r.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql"); err != nil {
			return nil, err
		}
		if rd.StandbyGolden, err = onStandby.pgbench.run(ctx, r.cfg.Clients, r.cfg.Round, "golden.sql"); err != nil {
			return nil, fmt.Errorf("on the formation: %w", err)
		}
		r.printf("round %d: single server accepted %.0f/s settled %.0f/s, golden.sql %.0f tps p50 %.2f ms | synchronous standby accepted %.0f/s settled %.0f/s, golden.sql %.0f tps p50 %.2f ms",
			i+1, rd.Single.AcceptedPerSec, rd.Single.SettledPerSec, rd.SingleGolden.TPS, rd.SingleGolden.Latency.P50MS,
			rd.Standby.AcceptedPerSec, rd.Standby.SettledPerSec, rd.StandbyGolden.TPS, rd.StandbyGolden.Latency.P50MS)
		rounds = append(rounds, rd)
	}
	return &PhaseResult{Rounds: rounds, Rows: []Row{
		compared("settled/s: synchronous standby vs single server", "/s", rounds,
			func(rd StandbyRound) (float64, float64) { return rd.Standby.SettledPerSec, rd.Single.SettledPerSec }, atLeast(0.8)),
		compared("new keys accepted/s: synchronous standby vs single server", "/s", rounds,
			func(rd StandbyRound) (float64, float64) { return rd.Standby.AcceptedPerSec, rd.Single.AcceptedPerSec }, nil),
		compared("new-key p50: synchronous standby vs single server", "ms", rounds,
			func(rd StandbyRound) (float64, float64) {
				return rd.Standby.Load.Latency.P50MS, rd.Single.Load.Latency.P50MS
			}, nil),
		compared("golden.sql tps: synchronous standby vs single server", "tps", rounds,
			func(rd StandbyRound) (float64, float64) { return rd.StandbyGolden.TPS, rd.SingleGolden.TPS }, nil),
		compared("golden.sql p50: synchronous standby vs single server", "ms", rounds,
			func(rd StandbyRound) (float64, float64) {
				return rd.StandbyGolden.Latency.P50MS, rd.SingleGolden.Latency.P50MS
			}, nil),
	}}, onStandby.awaitSettled(ctx, 5*time.Minute)
}
