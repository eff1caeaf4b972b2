package main

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/postgres"
	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/testkit/composecheck"
)

// The services of docker-compose.yml that run this binary, checked against
// the binary itself: a command it would refuse, a variable it does not
// read, or a wrong order breaks make test instead of the first compose up.

// servicesRunning names the services whose command starts with binary.
func servicesRunning(p *types.Project, binary string) []string {
	var names []string
	for name, s := range p.Services {
		if len(s.Command) > 0 && s.Command[0] == binary {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// requireDependsOn fails unless service waits for each dependency in the
// given condition.
func requireDependsOn(t *testing.T, p *types.Project, service string, want map[string]string) {
	t.Helper()
	s, err := p.GetService(service)
	require.NoError(t, err)
	got := map[string]string{}
	for name, dep := range s.DependsOn {
		got[name] = dep.Condition
	}
	require.Equal(t, want, got, "service %s: depends_on", service)
}

func TestCompose(t *testing.T) {
	t.Parallel()
	project := composecheck.Load(t, "../..", false)

	t.Run("TheServicesRunningAPI", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []string{"api", "demo-tenant", "migrate"}, servicesRunning(project, "api"))
	})

	t.Run("CommandsAreAccepted", func(t *testing.T) {
		t.Parallel()
		want := map[string]string{"migrate": "migrate", "demo-tenant": "tenants ensure", "api": "serve"}
		for service, name := range want {
			s, err := project.GetService(service)
			require.NoError(t, err)
			cmd, err := parseCommand(s.Command)
			require.NoError(t, err, "service %s: command %q", service, s.Command)
			require.Equal(t, name, cmd.Name, "service %s: command %q", service, s.Command)
		}
	})

	t.Run("EnvironmentIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		for _, service := range servicesRunning(project, "api") {
			s, err := project.GetService(service)
			require.NoError(t, err)
			composecheck.Config(t, s, "api", loadConfig)
		}
	})

	// The image has no curl: the health check is the binary's own
	// command, run with the service's environment.
	t.Run("HealthcheckIsTheBinarys", func(t *testing.T) {
		t.Parallel()
		s, err := project.GetService("api")
		require.NoError(t, err)
		require.NotNil(t, s.HealthCheck, "api has no health check")
		require.False(t, s.HealthCheck.Disable)
		test := []string(s.HealthCheck.Test)
		require.Equal(t, []string{"CMD", "api", "healthcheck"}, test)
		cmd, err := parseCommand(test[1:])
		require.NoError(t, err)
		require.Equal(t, "healthcheck", cmd.Name)
		require.NotNil(t, s.HealthCheck.Timeout)
		require.Greater(t, time.Duration(*s.HealthCheck.Timeout), serve.HealthcheckTimeout, "compose must not kill the check before it times out itself")
	})

	t.Run("APIIsPublished", func(t *testing.T) {
		t.Parallel()
		s, err := project.GetService("api")
		require.NoError(t, err)
		cfg := composecheck.Config(t, s, "api", loadConfig)
		composecheck.Publishes(t, s, cfg.ListenAddr)
		composecheck.Publishes(t, s, cfg.MetricsAddr)
	})

	// Every service of the image built from the Dockerfile names its
	// binary: the image's default command would silently serve the API.
	t.Run("EveryServiceOfTheImageNamesItsBinary", func(t *testing.T) {
		t.Parallel()
		api, err := project.GetService("api")
		require.NoError(t, err)
		binaries := []string{"api", "worker", "stripesim", "stripe-mock"}
		for name, s := range project.AllServices() {
			if s.Build == nil || s.Image != api.Image {
				continue
			}
			require.NotEmpty(t, s.Command, "service %s has no command", name)
			require.Contains(t, binaries, s.Command[0], "service %s runs no binary of the image", name)
		}
	})

	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		requireDependsOn(t, project, "postgres", map[string]string{"db-secrets": types.ServiceConditionCompletedSuccessfully})
		requireDependsOn(t, project, "db-roles", map[string]string{"postgres": types.ServiceConditionHealthy})
		requireDependsOn(t, project, "migrate", map[string]string{"db-roles": types.ServiceConditionCompletedSuccessfully})
		requireDependsOn(t, project, "demo-tenant", map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully})
		requireDependsOn(t, project, "api", map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully})
		// service_healthy waits forever on a service without a health check.
		pg, err := project.GetService("postgres")
		require.NoError(t, err)
		require.NotNil(t, pg.HealthCheck, "postgres has no health check")
		require.False(t, pg.HealthCheck.Disable, "postgres's health check is disabled")
		require.Contains(t, pg.HealthCheck.Test, "pg_isready")
		// One-shots must not be restarted, or "completed" never comes.
		for _, oneShot := range []string{"db-secrets", "db-roles", "migrate", "demo-tenant"} {
			s, err := project.GetService(oneShot)
			require.NoError(t, err)
			require.Contains(t, []string{"", "no"}, s.Restart, "one-shot %s is restarted", oneShot)
		}
	})
	// The pgbouncer profile, as the compose file's own comment turns it on:
	// the API serves through PgBouncer in transaction pooling and LISTENs on
	// PostgreSQL itself; the migrations and the demo tenant stay on
	// PostgreSQL, whose session they need or which they do not share.
	t.Run("BehindPgBouncer", func(t *testing.T) {
		t.Parallel()
		behind := composecheck.LoadWithEnvironment(t, "../..",
			map[string]string{"ONCEPAY_DATABASE_ADDR": "pgbouncer:6432", "ONCEPAY_DATABASE_POOL_MODE": "transaction"})
		pgbouncer, err := behind.GetService("pgbouncer")
		require.NoError(t, err)
		require.Equal(t, []string{"pgbouncer"}, pgbouncer.Profiles)
		require.Empty(t, pgbouncer.Ports, "PgBouncer is reached inside the project only")
		api, err := behind.GetService("api")
		require.NoError(t, err)
		cfg := composecheck.Config(t, api, "api", loadConfig)
		require.Equal(t, postgres.TransactionPooling, cfg.DatabasePoolMode)
		require.Equal(t, "pgbouncer:6432", host(t, cfg.DatabaseURL))
		require.Equal(t, "postgres:5432", host(t, cfg.sessionURL()))
		require.Equal(t, time.Second, cfg.WaitPoll, "waiters are woken by the LISTEN, the poll is the fallback")
		for _, service := range []string{"migrate", "demo-tenant"} {
			s, err := behind.GetService(service)
			require.NoError(t, err)
			cfg, err := loadDatabaseConfig(func(k string) string { return composecheck.Env(s)[k] })
			require.NoError(t, err)
			require.Equal(t, "postgres:5432", host(t, cfg.DatabaseURL), "service %s", service)
			require.Equal(t, postgres.SessionPooling, cfg.DatabasePoolMode, "service %s", service)
		}
	})

	// No password is written in the file, and each service reaches only the
	// secret of the role it runs as: the schema's owner migrates, everything
	// else runs as a role that cannot change the schema (deploy/db/roles.sql).
	t.Run("LeastPrivilege", func(t *testing.T) {
		t.Parallel()
		wantRole := map[string]string{"migrate": "oncepay_owner", "demo-tenant": "oncepay_app", "api": "oncepay_app", "worker": "oncepay_app"}
		wantSecrets := map[string][]string{"postgres": {"db-superuser"}, "migrate": {"db-owner"},
			"demo-tenant": {"db-app"}, "api": {"db-app"}, "worker": {"db-app"}, "pgbouncer": {"db-app"}}
		for name, s := range project.AllServices() {
			for k, v := range composecheck.Env(s) {
				if strings.Contains(k, "PASSWORD") && !strings.HasSuffix(k, "_FILE") {
					require.Empty(t, v, "service %s: %s has a value written in the file", name, k)
				}
			}
			var secrets []string
			for _, v := range s.Volumes {
				if strings.HasPrefix(v.Source, "db-") {
					secrets = append(secrets, v.Source)
					if name != "db-secrets" {
						require.True(t, v.ReadOnly, "service %s mounts %s writable", name, v.Source)
					}
				}
			}
			slices.Sort(secrets)
			if want, ok := wantSecrets[name]; ok {
				require.Equal(t, want, secrets, "service %s: the secrets it mounts", name)
			}

			dbURL, ok := composecheck.Env(s)["DATABASE_URL"]
			if !ok {
				require.NotContains(t, wantRole, name, "service %s has no DATABASE_URL", name)
				continue
			}
			u, err := url.Parse(dbURL)
			require.NoError(t, err)
			_, hasPassword := u.User.Password()
			require.False(t, hasPassword, "service %s: DATABASE_URL carries a password", name)
			require.Equal(t, wantRole[name], u.User.Username(), "service %s connects as", name)
			require.Equal(t, "/secrets/"+strings.TrimPrefix(secrets[0], "db-")+"/pgpass", u.Query().Get("passfile"),
				"service %s: DATABASE_URL's passfile", name)
		}
	})
}

func host(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Host
}
