package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/operation"
	"github.com/oncepay/oncepay/internal/operator"
	"github.com/oncepay/oncepay/internal/platform/id"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestHelpNeedsNothing: every command's --help succeeds without any
// configuration or database, and says what the command does.
func TestHelpNeedsNothing(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"--help":                  "api tenants ensure NAME",
		"help":                    "api migrate",
		"serve --help":            "SHUTDOWN_TIMEOUT",
		"migrate -h":              "Applies River's",
		"tenants create --help":   "shown only this\nonce",
		"tenants ensure --help":   "Keys issued before stay\nvalid",
		"tenants create x --help": "usage: api tenants create NAME",
		// A group's help lists its commands, not every command.
		"keys --help":     "api keys release TENANT KEY",
		"findings --help": "api findings resolve ID",
	} {
		var out bytes.Buffer
		// An unreachable database and invalid settings: help reads neither.
		getenv := env(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "LOG_LEVEL": "loud"})
		require.NoError(t, run(context.Background(), append([]string{"api"}, strings.Fields(args)...), getenv, &out), args)
		require.Contains(t, out.String(), want, args)
		require.Contains(t, out.String(), "DATABASE_URL", "help lists the variables read")
	}
}

func TestUnknownCommandsAndFlagsAreRefused(t *testing.T) {
	t.Parallel()
	for _, args := range []string{"frobnicate", "serve now", "tenants", "tenants create", "tenants delete x", "migrate --force", "tenants create a b"} {
		err := run(context.Background(), append([]string{"api"}, strings.Fields(args)...), env(map[string]string{}), io.Discard)
		require.Error(t, err, args)
		require.Contains(t, err.Error(), "usage", args)
		require.Equal(t, 2, serve.ExitCode(err), "a usage error exits 2: %s", args)
	}
	// A flag's value the command refuses is a usage error too; a command
	// that ran and failed is not.
	err := run(context.Background(), []string{"api", "payments", "list", "--status", "lost"}, env(map[string]string{}), io.Discard)
	require.Equal(t, 2, serve.ExitCode(err))
	err = run(context.Background(), []string{"api", "payments", "list"}, env(map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}), io.Discard)
	require.Error(t, err)
	require.Equal(t, 1, serve.ExitCode(err))
	require.Equal(t, operator.ExitFindings, serve.ExitCode(&serve.ExitError{Code: operator.ExitFindings, Err: errors.New("2 disagreements")}))
}

// TestAGroupAloneListsItsCommands: "api keys" names no command, but says
// which of its group there are, and only those.
func TestAGroupAloneListsItsCommands(t *testing.T) {
	t.Parallel()
	for group, want := range map[string]string{"keys": "api keys release TENANT KEY", "tenants": "api tenants rotate-key TENANT"} {
		err := run(context.Background(), []string{"api", group}, env(map[string]string{}), io.Discard)
		require.ErrorContains(t, err, group+": which command?", group)
		require.ErrorContains(t, err, want, group)
		require.NotContains(t, err.Error(), "api migrate", "only the group's commands")
	}
	err := run(context.Background(), []string{"api", "keys", "forget"}, env(map[string]string{}), io.Discard)
	require.ErrorContains(t, err, `unknown command "keys forget"`)
	require.ErrorContains(t, err, "api keys release")
}

// TestTenantNamesAreUnique: create refuses a taken name and says how to get
// a key for it; ensure creates once, then issues further keys for the same
// tenant, all of which stay valid.
func TestTenantNamesAreUnique(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	vars := env(map[string]string{"DATABASE_URL": dbURL})
	tenants := func(verb, name string) (tenant.Created, error) {
		var out bytes.Buffer
		err := run(context.Background(), []string{"api", "tenants", verb, name}, vars, &out)
		var created tenant.Created
		if err == nil {
			require.NoError(t, json.Unmarshal(out.Bytes(), &created), out.String())
		}
		return created, err
	}
	first, err := tenants("create", "globex")
	require.NoError(t, err)
	_, err = tenants("create", " globex ")
	require.ErrorIs(t, err, tenant.ErrExists)
	require.ErrorContains(t, err, first.TenantID)
	require.ErrorContains(t, err, "tenants ensure")

	again, err := tenants("ensure", "globex")
	require.NoError(t, err)
	require.Equal(t, first.TenantID, again.TenantID)
	require.NotEqual(t, first.APIKey, again.APIKey)
	fresh, err := tenants("ensure", "initech")
	require.NoError(t, err)
	require.NotEqual(t, first.TenantID, fresh.TenantID)

	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	auth := tenant.NewAuthenticator(pool, tenant.AuthConfig{})
	for _, c := range []tenant.Created{first, again, fresh} {
		got, err := auth.Authenticate(context.Background(), c.APIKey)
		require.NoError(t, err)
		require.Equal(t, c.TenantID, got)
	}
}

// TestEachCommandReadsWhatItsHelpLists: every command is run with a
// recording environment, and reads no variable its --help does not list;
// an operator's command lists none of the API server's own, and a bad
// value of one of those stops no operator's command.
func TestEachCommandReadsWhatItsHelpLists(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	serverOnly := map[string]string{"API_TENANT_RATE": "nonsense", "HTTP_WRITE_TIMEOUT": "1ms", "LISTEN_ADDR": "not an address"}
	args := map[string][]string{
		"tenants create": {"readers-" + id.New("t")[2:]}, "tenants ensure": {"readers"}, "tenants set-account": {"readers", "none"},
		"tenants rotate-key": {"readers"}, "tenants revoke-key": {"readers", "k_nosuchkey"},
		"payments show": {"pay_nosuchpayment"}, "reconcile": {"pay_nosuchpayment"},
		"keys release":     {"readers", "no-such-key", "--reason", "r", "--operator", "o"},
		"findings resolve": {"fnd_nosuchfinding", "--note", "n", "--operator", "o"},
	}
	for _, command := range operator.Names() {
		if command == "serve" || command == "healthcheck" {
			continue // they serve, or ask a server; their lists are checked by the compose tests
		}
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), append([]string{"api"}, append(strings.Fields(command), "--help")...), env(nil), &out))
		listed := map[string]bool{}
		for _, line := range strings.Split(out.String(), "\n") {
			if name, ok := strings.CutPrefix(line, "  "); ok && name == strings.ToUpper(name) && strings.Contains(name, "_") {
				listed[name] = true
			}
		}
		require.True(t, listed["DATABASE_URL"], "%s --help lists DATABASE_URL", command)
		for name := range serverOnly {
			require.False(t, listed[name], "%s --help lists the API server's %s", command, name)
		}

		vars := map[string]string{"DATABASE_URL": dbURL, "STRIPE_SECRET_KEY": "sk_test_oncepay", "STRIPE_API_BASE": "http://127.0.0.1:1"}
		for k, v := range serverOnly {
			vars[k] = v
		}
		read := map[string]bool{}
		getenv := func(name string) string {
			read[name] = true
			return vars[name]
		}
		err := run(context.Background(), append([]string{"api"}, append(strings.Fields(command), args[command]...)...), getenv, io.Discard)
		if err != nil {
			require.NotContains(t, err.Error(), "configuration", "%s is stopped by a variable it does not read", command)
		}
		for name := range read {
			require.True(t, listed[name], "%s reads %s, which its --help does not list", command, name)
		}
	}
}

// TestHelpNamesEveryKind: the commands that reach an operation of any kind
// say so by the registry's names, so a kind a clone adds is in their help
// (and in the overview's one line each) without an edit there.
func TestHelpNamesEveryKind(t *testing.T) {
	t.Parallel()
	help := func(args ...string) string {
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), append([]string{"api"}, args...), env(nil), &out))
		return out.String()
	}
	overview, reconcile, release, check := help("--help"), help("reconcile", "--help"), help("keys", "release", "--help"),
		help("ledger", "check", "--help")
	list, show := help("operations", "list", "--help"), help("operations", "show", "--help")
	ledgerEnv := operation.Env{Logger: slog.New(slog.DiscardHandler)}
	for _, k := range kinds.All() {
		for _, text := range []string{overview, reconcile, release, list, show} {
			require.Contains(t, text, k.Name(), "a help that leaves out %s:\n%s", k.Name(), text)
		}
		for _, prefix := range k.IDPrefixes() {
			require.Contains(t, reconcile, prefix+"_", "reconcile's help names no id of %s", k.Name())
			require.Contains(t, show, prefix+"_", "operations show's help names no id of %s", k.Name())
		}
		if k.Ledger(ledgerEnv) != nil {
			require.Contains(t, check, k.Name()+"s", "ledger check's help leaves out %s", k.Name())
		}
	}
}
