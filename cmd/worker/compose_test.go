package main

import (
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/testkit/composecheck"
)

// The worker service of docker-compose.yml, checked against the binary
// itself: a command it would refuse, a variable it does not read, a wrong
// order or a provider it cannot reach breaks make test instead of the first
// compose up.

func TestCompose(t *testing.T) {
	t.Parallel()
	project := composecheck.Load(t, "../..", false)
	worker, err := project.GetService("worker")
	require.NoError(t, err)

	t.Run("OneServiceRunsTheWorker", func(t *testing.T) {
		t.Parallel()
		running := composecheck.ServicesRunning(project, "worker")
		// Two would be safe (River shares the jobs out), but the stripe-mock
		// profile must not start a second worker aimed elsewhere.
		require.Equal(t, []string{"worker"}, running)
	})

	t.Run("CommandIsAccepted", func(t *testing.T) {
		t.Parallel()
		help, err := serve.ParseNoArgs(worker.Command)
		require.NoError(t, err, "command %q", worker.Command)
		require.False(t, help, "command %q prints help and exits", worker.Command)
	})

	// The image has no curl: the health check is the binary's own
	// command, run with the service's environment.
	t.Run("HealthcheckIsTheBinarys", func(t *testing.T) {
		t.Parallel()
		require.NotNil(t, worker.HealthCheck, "worker has no health check")
		require.False(t, worker.HealthCheck.Disable)
		require.Equal(t, []string{"CMD", "worker", "healthcheck"}, []string(worker.HealthCheck.Test))
		require.NotNil(t, worker.HealthCheck.Timeout)
		require.Greater(t, time.Duration(*worker.HealthCheck.Timeout), serve.HealthcheckTimeout, "compose must not kill the check before it times out itself")
	})

	t.Run("EnvironmentIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		composecheck.Config(t, worker, "the worker", loadConfig)
	})

	t.Run("EnvironmentOfTheComposeTestIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		s, err := composecheck.Load(t, "../..", true).GetService("worker")
		require.NoError(t, err)
		cfg := composecheck.Config(t, s, "the worker", loadConfig)
		require.Less(t, cfg.RescueStuckAfter, defaultConfig(t).RescueStuckAfter, "the override shortens the timers")
	})

	t.Run("AdminIsPublished", func(t *testing.T) {
		t.Parallel()
		addr := composecheck.Config(t, worker, "the worker", loadConfig).AdminAddr
		require.Len(t, worker.Ports, 1)
		composecheck.Publishes(t, worker, addr)
	})

	// The worker charges through the simulator's service, at the port the
	// simulator listens on.
	t.Run("ProviderIsTheSimulator", func(t *testing.T) {
		t.Parallel()
		base, err := url.Parse(composecheck.Config(t, worker, "the worker", loadConfig).StripeAPIBase)
		require.NoError(t, err)
		sim, err := project.GetService(base.Hostname())
		require.NoError(t, err, "STRIPE_API_BASE=%s names no service", base)
		require.NotNil(t, sim.Environment["STRIPESIM_ADDR"])
		_, simPort, err := net.SplitHostPort(*sim.Environment["STRIPESIM_ADDR"])
		require.NoError(t, err)
		require.Equal(t, simPort, base.Port(), "STRIPE_API_BASE=%s: the simulator listens on %s", base, simPort)
	})

	// The pgbouncer profile, as the compose file's own comment turns it on.
	t.Run("BehindPgBouncer", func(t *testing.T) {
		t.Parallel()
		behind, err := composecheck.LoadWithEnvironment(t, "../..",
			map[string]string{"ONCEPAY_DATABASE_ADDR": "pgbouncer:6432", "ONCEPAY_DATABASE_POOL_MODE": "transaction"}).GetService("worker")
		require.NoError(t, err)
		cfg := composecheck.Config(t, behind, "the worker", loadConfig)
		require.Equal(t, postgres.TransactionPooling, cfg.DatabasePoolMode)
		u, err := url.Parse(cfg.DatabaseURL)
		require.NoError(t, err)
		require.Equal(t, "pgbouncer:6432", u.Host)
	})

	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		got := map[string]string{}
		for name, dep := range worker.DependsOn {
			got[name] = dep.Condition
		}
		require.Equal(t, map[string]string{
			"migrate":   types.ServiceConditionCompletedSuccessfully,
			"stripesim": types.ServiceConditionStarted,
		}, got)
	})
}

// defaultConfig is the configuration of the smallest valid environment.
func defaultConfig(t *testing.T) config {
	t.Helper()
	cfg, err := loadConfig(func(name string) string {
		if name == "STRIPE_SECRET_KEY" {
			return "sk_test_x"
		}
		return ""
	})
	require.NoError(t, err)
	return cfg
}
