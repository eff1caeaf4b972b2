package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SeamRound is one round of one fast path's comparison: its measure with
// the path on, then off, the process restarted with the setting between.
type SeamRound struct {
	On  float64 `json:"on"`
	Off float64 `json:"off"`
}

// seams measures what each fast path buys (docs/scaling.md): its measure
// with the path on and with it off, in alternating rounds, the API or the
// worker restarted with the path's setting between. Each row's ratio is
// on over off.
func (r *run) seams(ctx context.Context) (*PhaseResult, error) {
	r.printf("priming %d keys for the replays", r.cfg.ReplayKeys/4)
	first := r.seq.Load() + 1
	prime := closedLoop(ctx, r.client, r.cfg.Clients, 10*time.Minute, int64(r.cfg.ReplayKeys/4), r.newKeyRequest(r.stack.APIURL, 0, nil))
	if err := checkErrors("priming", prime); err != nil {
		return nil, err
	}
	replays := r.replayRequest(first, r.seq.Load()-first+1)
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	// The API's seams are measured with the worker stopped, so that the
	// API alone uses the database (as in the first phases); the worker's
	// and the events' drain a backlog with it.
	if err := r.stack.Kill("worker"); err != nil {
		return nil, err
	}
	seams := []struct {
		measure, unit, process, setting, on, off string
		run                                      func(context.Context) (float64, error)
	}{
		{"one-round-trip new key", "req/s", "api", "API_ONE_TRIP_KEYS", "on", "off", func(ctx context.Context) (float64, error) {
			return r.loadRate(ctx, "new-key POST", r.newKeyRequest(r.stack.APIURL, 0, nil))
		}},
		{"replay memory", "req/s", "api", "API_REPLAY_CACHE_TTL", "1m", "0", func(ctx context.Context) (float64, error) {
			return r.loadRate(ctx, "replay", replays)
		}},
		{"grouped charge starts and records", "settled/s", "worker", "WORKER_GROUPING", "on", "off", func(ctx context.Context) (float64, error) {
			// Its first drain settles what the API's seams accepted.
			if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
				return 0, err
			}
			return r.drainRate(ctx)
		}},
		{"events stored without a job", "settled/s", "api", "API_EVENT_SHORTCUTS", "on", "off", r.drainRate},
	}
	pr := &PhaseResult{}
	all := map[string][]SeamRound{}
	for _, seam := range seams {
		var rounds []SeamRound
		for i := range r.cfg.Rounds {
			var rd SeamRound
			for _, side := range []struct {
				value string
				into  *float64
			}{{seam.on, &rd.On}, {seam.off, &rd.Off}} {
				if err := r.restartWith(ctx, seam.process, seam.setting+"="+side.value); err != nil {
					return nil, err
				}
				v, err := seam.run(ctx)
				if err != nil {
					return nil, fmt.Errorf("%s with %s=%s: %w", seam.measure, seam.setting, side.value, err)
				}
				*side.into = v
			}
			r.printf("round %d: %s: on %.0f %s, off %.0f %s", i+1, seam.measure, rd.On, seam.unit, rd.Off, seam.unit)
			rounds = append(rounds, rd)
		}
		if err := r.restartWith(ctx, seam.process, seam.setting+"="+seam.on); err != nil {
			return nil, err
		}
		all[seam.measure] = rounds
		pr.Rows = append(pr.Rows, compared(seam.measure+" (on vs off)", seam.unit, rounds,
			func(rd SeamRound) (float64, float64) { return rd.On, rd.Off }, nil))
	}
	pr.Rounds = all
	return pr, r.awaitSettled(ctx, 5*time.Minute)
}

// loadRate is the throughput of a round of req.
func (r *run) loadRate(ctx context.Context, what string, req request) (float64, error) {
	r.warmUp(ctx, req)
	res := closedLoop(ctx, r.client, r.cfg.Clients, r.cfg.Round, 0, req)
	return res.Throughput, checkErrors(what, res)
}

// drainRate accepts two fifths of the backlog the slow-provider phase
// takes (2,000 payments by default) with the worker stopped, then starts
// it and reads how many a second it settles, their events' jobs included.
func (r *run) drainRate(ctx context.Context) (float64, error) {
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return 0, err
	}
	// Its jobs are done: River completes them in batches, just after
	// their payments settle.
	time.Sleep(time.Second)
	if err := r.stack.Kill("worker"); err != nil {
		return 0, err
	}
	backlog := closedLoop(ctx, r.client, r.cfg.Clients, 10*time.Minute, int64(max(r.cfg.Backlog*2/5, 1)), r.newKeyRequest(r.stack.APIURL, 0, nil))
	if err := checkErrors("backlog", backlog); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := r.restartWorker(ctx, nil); err != nil {
		return 0, err
	}
	if err := r.awaitSettled(ctx, 5*time.Minute); err != nil {
		return 0, err
	}
	return float64(backlog.Requests) / time.Since(start).Seconds(), nil
}

// restartWith restarts the process ("api" or "worker") once with settings
// changed, every other as it was: NAME=value sets a variable, NAME alone
// removes the process's own (the stack's, or the default, applies again).
func (r *run) restartWith(_ context.Context, process string, settings ...string) error {
	p := r.stack.Process(process)
	if p == nil {
		return fmt.Errorf("no %s process", process)
	}
	env := slices.Clone(p.Env)
	for _, setting := range settings {
		name, _, set := strings.Cut(setting, "=")
		if name == "" {
			return errors.New("a setting is NAME=value, or NAME to remove it")
		}
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
		if set {
			env = append(env, setting)
		}
	}
	select {
	case <-p.Exited():
	default:
		if err := r.stack.Kill(process); err != nil {
			return err
		}
	}
	p.Env = env
	return r.stack.Restart(process)
}
