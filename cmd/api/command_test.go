package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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
	}
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
