package payments

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/provider"
)

// AuthorizationLifetime is how long the provider holds an uncaptured
// authorization before it voids it (Stripe: seven days).
const AuthorizationLifetime = 7 * 24 * time.Hour

// Expirer notices authorizations the provider voided on its own: a
// payment still requires_capture once its authorization is older than
// AuthorizationLifetime has its intent read, and is settled from it
// (canceled, or succeeded if it was captured elsewhere), as a webhook
// would settle it. It is the backstop for a lost payment_intent.canceled
// event; it never sends anything to the provider.
type Expirer struct {
	pool     *pgxpool.Pool
	keys     *idempotency.Store
	provider *provider.Client
	logger   *slog.Logger
	// Batch caps the payments looked at per run. Defaults to 100.
	Batch int
	// CallTimeout bounds one read. Defaults to 20s.
	CallTimeout time.Duration
}

// NewExpirer returns the Expirer.
func NewExpirer(pool *pgxpool.Pool, keys *idempotency.Store, pc *provider.Client, logger *slog.Logger) *Expirer {
	return &Expirer{pool: pool, keys: keys, provider: pc, logger: logger}
}

// ExpireResult counts what a run did.
type ExpireResult struct {
	// Looked is how many old authorizations were read; Settled how many of
	// them had ended at the provider and were recorded.
	Looked, Settled int
}

// Run reads every authorization past its lifetime (the oldest first) and
// settles those that ended.
func (e *Expirer) Run(ctx context.Context) (ExpireResult, error) {
	var res ExpireResult
	rows, err := e.pool.Query(ctx, `
		SELECT tenant_id, id, provider_payment_intent_id, coalesce(provider_account, '') FROM payments
		WHERE status = 'requires_capture' AND updated_at < now() - $1 * interval '1 microsecond'
		ORDER BY updated_at LIMIT $2`, AuthorizationLifetime.Microseconds(), cmp.Or(e.Batch, 100))
	if err != nil {
		return res, fmt.Errorf("find old authorizations: %w", err)
	}
	old, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ TenantID, ID, IntentID, Account string }])
	if err != nil {
		return res, fmt.Errorf("find old authorizations: %w", err)
	}
	for _, p := range old {
		res.Looked++
		callCtx, cancel := context.WithTimeout(ctx, cmp.Or(e.CallTimeout, 20*time.Second))
		out := e.provider.For(p.Account).RetrieveIntent(callCtx, p.IntentID)
		cancel()
		log := e.logger.With(slog.String("tenant_id", p.TenantID), slog.String("payment_id", p.ID), slog.String("intent_id", p.IntentID))
		if out.Err != nil {
			log.WarnContext(ctx, "could not read an old authorization's intent; looking again next run", slog.Any("error", out.Err))
			continue
		}
		s, err := Settle(ctx, e.pool, e.keys, p.Account, out)
		if err != nil {
			// One payment's failure must not hold up those behind it, which
			// every pass reads after it.
			log.ErrorContext(ctx, "could not settle an old authorization; looking again next run", slog.Any("error", err))
			continue
		}
		if s.Verdict == Recorded {
			res.Settled++
			log.InfoContext(ctx, "authorization ended at the provider", slog.String("status", string(s.Payment.Status)))
			continue
		}
		log.WarnContext(ctx, "authorization past its lifetime is still held at the provider", slog.String("intent_status", string(out.Intent.Status)))
	}
	return res, nil
}

// ExpireAuthorizationsArgs is the Expirer's periodic job.
type ExpireAuthorizationsArgs struct{}

// Kind is the job's River kind.
func (ExpireAuthorizationsArgs) Kind() string { return "expire_authorizations" }

// InsertOpts puts the job on the maintenance queue, one at a time.
func (ExpireAuthorizationsArgs) InsertOpts() river.InsertOpts {
	return operation.MaintenanceInsertOpts()
}

// ExpireWorker runs the Expirer as a River job.
type ExpireWorker struct {
	river.WorkerDefaults[ExpireAuthorizationsArgs]
	Expirer *Expirer
}

// Work runs one pass.
func (w *ExpireWorker) Work(ctx context.Context, _ *river.Job[ExpireAuthorizationsArgs]) error {
	res, err := w.Expirer.Run(ctx)
	if res.Looked > 0 || err != nil {
		w.Expirer.logger.InfoContext(ctx, "authorization expiry pass", slog.Int("looked", res.Looked), slog.Int("settled", res.Settled), slog.Any("error", err))
	}
	return err
}
