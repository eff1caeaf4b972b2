// Package pgtest gives tests a real PostgreSQL database of their own.
//
// The server is, in order: TEST_DATABASE_URL, the server on 127.0.0.1:5432,
// or a throwaway cluster started from the installed PostgreSQL binaries.
// Without any of them tests fail (never skip) with a message saying how to
// get one. Every database handed out is a copy of a template that has been
// migrated once per schema version, so packages and tests run in parallel
// without seeing each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/testkit/localpg"
	"github.com/oncepay/oncepay/migrations"
)

// riverSchemaTag names River's schema in the template's name; bump it with
// the River dependency so a stale template is never reused.
const riverSchemaTag = "river-v0.51"

// server is resolved once per test binary: finding or starting PostgreSQL
// and migrating the template are too slow to repeat per test.
var server struct {
	once     sync.Once
	adminURL string
	template string
	// templateMu serialises re-making a dropped template within a binary.
	templateMu  sync.Mutex
	err         error
	description string
}

// AdminURL returns the URL of the maintenance database on the test server.
func AdminURL(tb testing.TB) string {
	tb.Helper()
	prepare(tb)
	return server.adminURL
}

// NewDatabase creates a fresh, migrated database and returns its URL. The
// database is dropped when the test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	prepare(tb)
	ctx := context.Background()
	name := "oncepay_test_" + randomHex(6)
	if err := copyTemplate(ctx, name); err != nil {
		tb.Fatalf("pgtest: create database from template: %v", err)
	}
	dropAtCleanup(tb, name)
	return withDatabase(server.adminURL, name)
}

// NewEmptyDatabase creates a database with no schema at all (for tests of
// migrations and of who may run them) and returns its URL. The database is
// dropped when the test ends.
func NewEmptyDatabase(tb testing.TB) string {
	tb.Helper()
	prepare(tb)
	name := "oncepay_empty_" + randomHex(6)
	if err := adminExec(context.Background(), server.adminURL, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	dropAtCleanup(tb, name)
	return withDatabase(server.adminURL, name)
}

func dropAtCleanup(tb testing.TB, name string) {
	tb.Cleanup(func() {
		// FORCE ends connections a test left behind (a killed child process).
		if err := adminExec(context.Background(), server.adminURL, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			tb.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
}

// DropRolesAtCleanup drops the named roles when the test ends, after the
// databases it created (cleanups run last-registered first, so call it
// before NewEmptyDatabase): roles are the server's, not a database's, and
// would outlive it.
func DropRolesAtCleanup(tb testing.TB, roles ...string) {
	tb.Helper()
	prepare(tb)
	tb.Cleanup(func() {
		for _, role := range roles {
			if err := adminExec(context.Background(), server.adminURL, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
				tb.Errorf("pgtest: drop role %s: %v", role, err)
			}
		}
	})
}

// AsRole returns dbURL with its user and password replaced.
func AsRole(tb testing.TB, dbURL, user, password string) string {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		tb.Fatalf("pgtest: AsRole needs a URL, not %q", dbURL)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// shared is the database SharedDatabase hands out, one per test binary.
var shared struct {
	mu   sync.Mutex
	name string
	url  string
}

// SharedDatabase returns a database shared by all tests of the package,
// created on first use and dropped by Main when the package's tests end.
// Tests sharing it isolate themselves by tenant. It requires a TestMain that
// calls Main.
func SharedDatabase(tb testing.TB) string {
	tb.Helper()
	prepare(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.url != "" {
		return shared.url
	}
	name := "oncepay_test_" + randomHex(6)
	if err := copyTemplate(context.Background(), name); err != nil {
		tb.Fatalf("pgtest: create shared database: %v", err)
	}
	shared.name, shared.url = name, withDatabase(server.adminURL, name)
	return shared.url
}

// SharedDatabaseURL is SharedDatabase for examples, which have no testing.TB;
// it panics where SharedDatabase would fail the test.
func SharedDatabaseURL() string {
	return SharedDatabase(panicTB{})
}

type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Main runs the package's tests, drops the shared database and exits.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain with cleanup of its own: it returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	if shared.name != "" {
		if err := adminExec(context.Background(), server.adminURL, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", shared.name)); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: drop shared database: %v\n", err)
		}
	}
	return code
}

// NewPool creates a fresh database and a pool on it, closed when the test ends.
func NewPool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	dbURL := NewDatabase(tb)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, dbURL
}

// copyTemplate creates database name from the template. A checkout with
// other migrations (another branch's tests on the same server) may have
// dropped the template as stale since this binary made it: it is then made
// again, once.
func copyTemplate(ctx context.Context, name string) error {
	create := func() error {
		return adminExec(ctx, server.adminURL, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, server.template))
	}
	err := create()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name: no such template
		return err
	}
	server.templateMu.Lock()
	_, err = ensureTemplate(ctx, server.adminURL)
	server.templateMu.Unlock()
	if err != nil {
		return err
	}
	return create()
}

func prepare(tb testing.TB) {
	tb.Helper()
	server.once.Do(func() {
		server.adminURL, server.description, server.err = findServer(context.Background())
		if server.err != nil {
			return
		}
		server.template, server.err = ensureTemplate(context.Background(), server.adminURL)
	})
	if server.err != nil {
		tb.Fatalf("pgtest: no PostgreSQL for the tests: %v\n\n"+
			"Set TEST_DATABASE_URL, start a server on 127.0.0.1:5432 (trust or password in the URL),\n"+
			"or install the PostgreSQL server package so the tests can start a throwaway cluster.", server.err)
	}
}

// throwawayPort is where the throwaway cluster listens. It is fixed so that
// every test binary of one `go test ./...` shares one cluster; it is left
// running afterwards (stop it with `make pg-stop`).
const throwawayPort = 55432

func findServer(ctx context.Context) (adminURL, description string, err error) {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", "", fmt.Errorf("TEST_DATABASE_URL is set but unreachable: %w", err)
		}
		return u, "TEST_DATABASE_URL", nil
	}
	local := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	localErr := ping(ctx, local)
	if localErr == nil {
		return local, "127.0.0.1:5432", nil
	}
	u, err := localpg.Start(ctx, filepath.Join(os.TempDir(), "oncepay-pgtest"), throwawayPort, localpg.Options{})
	if err != nil {
		return "", "", fmt.Errorf("127.0.0.1:5432: %v; throwaway cluster: %w", localErr, err)
	}
	return u, "throwaway cluster", nil
}

func ping(ctx context.Context, dbURL string) error { return localpg.Ping(ctx, dbURL) }

// ensureTemplate migrates a template database once per schema version. It is
// built under a temporary name and renamed when complete, so a test binary
// that died half-way never leaves a broken template behind, and an advisory
// lock makes the parallel test binaries wait for the one that builds it.
func ensureTemplate(ctx context.Context, adminURL string) (string, error) {
	version, err := schemaVersion()
	if err != nil {
		return "", err
	}
	name := "oncepay_template_" + version
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7171)"); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock(7171)") //nolint:errcheck // the session ends right after

	dropStaleTemplates(ctx, conn, name)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, stampTemplate(ctx, conn, name)
	}
	building := name + "_building"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", building)); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, withDatabase(adminURL, building))
	if err != nil {
		return "", err
	}
	logger := slog.New(slog.DiscardHandler)
	err = postgres.Migrate(ctx, pool, logger)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, stampTemplate(ctx, conn, name)
}

// templateStampPrefix starts a template's comment, which records when a
// test binary last used it.
const templateStampPrefix = "oncepay test template, last used at unix "

// staleTemplateAge is how long a template of another schema must have gone
// unused before it is dropped: longer than any test run, so that two
// checkouts with different migrations (two branches) testing against one
// server at once never drop each other's template mid-run.
const staleTemplateAge = 6 * time.Hour

func stampTemplate(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%s%d'", pgx.Identifier{name}.Sanitize(), templateStampPrefix, time.Now().Unix()))
	return err
}

// dropStaleTemplates drops the templates of other schemas that no test
// binary has used for staleTemplateAge, so the server keeps a few
// templates, not one per migration ever tested. One still in use (a test
// binary copying it right now) is left for a later run to drop.
func dropStaleTemplates(ctx context.Context, conn *pgx.Conn, current string) {
	rows, err := conn.Query(ctx, `SELECT datname, coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database
		WHERE datname LIKE 'oncepay\_template\_%' AND datname NOT LIKE '%\_building' AND datname <> $1`, current)
	if err != nil {
		return
	}
	type template struct {
		Name, Comment string
	}
	others, err := pgx.CollectRows(rows, pgx.RowToStructByPos[template])
	if err != nil {
		return
	}
	for _, t := range others {
		lastUsed, err := strconv.ParseInt(strings.TrimPrefix(t.Comment, templateStampPrefix), 10, 64)
		if err == nil && time.Since(time.Unix(lastUsed, 0)) < staleTemplateAge {
			continue
		}
		name := t.Name
		ident := pgx.Identifier{name}.Sanitize()
		// A database marked as a template cannot be dropped until unmarked.
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" IS_TEMPLATE false"); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident)
		}
	}
}

// schemaVersion hashes the migration files, so a changed migration gets a
// new template instead of tests running against an old schema.
func schemaVersion() (string, error) {
	h := sha256.New()
	h.Write([]byte(riverSchemaTag))
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func withDatabase(dbURL, name string) string {
	if strings.Contains(dbURL, "://") {
		u, err := url.Parse(dbURL)
		if err == nil {
			u.Path = "/" + name
			return u.String()
		}
	}
	return dbURL + " dbname=" + name
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
