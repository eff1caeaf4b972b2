package templatecheck_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/pgtest"
	"github.com/oncepay/oncepay/tools/template"
)

// TestMakeTemplate runs the command the docs give, `make template
// NEW=example.com/acme/payments DIR=…`, then builds, vets and runs a test
// subset in the copy, and reads every file of it: a path the code spells
// out, a product name left behind or a file outside git would break the
// template.
func TestMakeTemplate(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "payments")
	mk := exec.Command("make", "--no-print-directory", "template", "NEW=example.com/acme/payments", "DIR="+dir)
	mk.Dir = root
	out, err := mk.CombinedOutput()
	require.NoError(t, err, "make template:\n%s", out)
	require.Contains(t, string(out), "cd "+dir+" && make run")
	require.Contains(t, string(out), "make test")

	run := func(dir string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s in the copy:\n%s", name, strings.Join(args, " "), out)
		return string(out)
	}
	require.Equal(t, "1\n", run(dir, "git", "rev-list", "--count", "HEAD"), "one commit")
	require.Empty(t, run(dir, "git", "status", "--porcelain"), "everything committed")
	require.Equal(t, "example.com/acme/payments\n", run(dir, "go", "list", "-m"))

	run(dir, "go", "build", "./...")
	run(dir, "go", "vet", "./...")
	// The copy's tests keep a migrated template database of their own on
	// the server, named for the new product; nothing of this test stays.
	t.Cleanup(func() { dropDatabases(t, "payments\\_template\\_%") })
	tested := run(dir, "go", "test", "-count=1", "-run", "TestTransferEndpointIsIdempotent|TestParseKey|TestFingerprint|TestLayout",
		"./examples/...", "./internal/idempotency/", "./tools/layoutcheck/")
	require.Contains(t, tested, "ok  \texample.com/acme/payments/examples/memo")
	require.Contains(t, tested, "ok  \texample.com/acme/payments/tools/layoutcheck")
	if _, err := os.Stat(filepath.Join(dir, "client", "go.mod")); err == nil {
		run(filepath.Join(dir, "client"), "go", "vet", "./...")
		require.Contains(t, run(filepath.Join(dir, "client"), "go", "list", "-m"), "example.com/acme/payments/client")
	}

	// The product name is gone everywhere but the attribution line, and
	// the new name is where it was: database, metrics, images.
	var mentions []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for n := 1; sc.Scan(); n++ {
			if bytes.Contains(bytes.ToLower(sc.Bytes()), []byte(template.Product)) || bytes.Contains(sc.Bytes(), []byte(template.APIKeyPrefix)) {
				rel, _ := filepath.Rel(dir, path)
				mentions = append(mentions, rel+":"+sc.Text())
			}
		}
		return sc.Err()
	}))
	require.Len(t, mentions, 1, "only the attribution names the template, and no API key keeps its prefix: %s", strings.Join(mentions, "\n"))
	require.True(t, strings.HasPrefix(mentions[0], "README.md:"), mentions[0])
	makefile, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	require.NoError(t, err)
	require.Contains(t, string(makefile), "127.0.0.1:5432/payments?", "the database is named for the new service")
	compose, err := os.ReadFile(filepath.Join(dir, "docker-compose.yml"))
	require.NoError(t, err)
	require.Contains(t, string(compose), "payments", "the images and containers are named for the new service")

	// A second run into the same folder refuses and changes nothing.
	again := exec.Command("make", "--no-print-directory", "template", "NEW=example.com/acme/payments", "DIR="+dir)
	again.Dir = root
	out, err = again.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "is not empty")
}

// TestMakeTemplateRefusesBadInput: a missing argument, a module path or a
// product name that cannot be an identifier is refused before anything is
// written.
func TestMakeTemplateRefusesBadInput(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	for _, tc := range []struct {
		vars []string // DIR is added to each but the first
		want string
	}{
		{[]string{"NEW=example.com/acme/payments"}, "usage: make template"},
		{[]string{"NEW=example.com/acme/pay ments"}, "is not a module path"},
		{[]string{"NEW=example.com/acme/Pay-Ments"}, "must be 2 to 31 lowercase letters"},
		{[]string{"NEW=example.com/acme/payments", "NAME=oncepay"}, "must not stay"},
	} {
		target := filepath.Join(t.TempDir(), "new")
		args := append([]string{"--no-print-directory", "template"}, tc.vars...)
		if tc.want != "usage: make template" {
			args = append(args, "DIR="+target)
		}
		cmd := exec.Command("make", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%v", tc.vars)
		require.Contains(t, string(out), tc.want, "%v", tc.vars)
		_, err = os.Stat(target)
		require.ErrorIs(t, err, os.ErrNotExist, "%v: nothing written", tc.vars)
	}
}

// dropDatabases drops the test server's databases whose names are LIKE
// pattern.
func dropDatabases(t *testing.T, pattern string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, pattern)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, name := range names {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	return filepath.Dir(strings.TrimSpace(string(out)))
}
