package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/oncepay/oncepay/migrations"
)

// migrateLockID is the advisory lock that serialises concurrent migrators
// (two deploys, or parallel test packages preparing a template), so neither
// River's nor goose's bookkeeping sees a half-applied schema.
const migrateLockID int64 = 0x6f6e63657061790 // "oncepay"

// Migrate brings the database to the latest schema: River's tables first,
// then oncepay's own. Running it on an up-to-date database changes nothing.
// It holds a session advisory lock throughout, so pool must be opened on
// PostgreSQL itself (or a pooler in session mode), never through
// transaction pooling.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection for migration lock: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockID); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session's end, which Release
		// would delay; closing the connection ends the session and the lock.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrateLockID); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("create river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate river schema: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", slog.Int("version", v.Version))
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return gooseUp(ctx, db, logger)
}

func gooseUp(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("create goose provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "applied migration", slog.String("file", r.Source.Path), slog.Duration("took", r.Duration))
	}
	return nil
}
