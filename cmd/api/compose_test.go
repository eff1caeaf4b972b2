package main

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// The services of docker-compose.yml that run this binary, checked against
// the binary itself: a command it would refuse, a variable it does not
// read, or a wrong order breaks make test instead of the first compose up.

// loadCompose loads docker-compose.yml (and the compose test's override
// when withTestOverride) as docker compose does, every profile enabled,
// with no variable from the environment the test runs in: each ${VAR}
// takes the file's own default.
func loadCompose(t *testing.T, withTestOverride bool) *types.Project {
	t.Helper()
	files := []string{"../../docker-compose.yml"}
	if withTestOverride {
		files = append(files, "../../deploy/compose.test.yml")
	}
	ctx := context.Background()
	details, err := loader.LoadConfigFiles(ctx, files, "../..")
	require.NoError(t, err)
	details.Environment = types.Mapping{}
	project, err := loader.LoadWithContext(ctx, *details, loader.WithProfiles([]string{"*"}),
		func(o *loader.Options) { o.SetProjectName("oncepay", true) })
	require.NoError(t, err)
	return project
}

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

// composeEnv is a service's environment as the container gets it.
func composeEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// loadServiceConfig loads this binary's configuration from the service's
// environment and fails the test for a variable that it sets and the
// binary never reads (a misspelt name is silently ignored otherwise).
func loadServiceConfig(t *testing.T, s types.ServiceConfig) config {
	t.Helper()
	env := composeEnv(s)
	read := map[string]bool{}
	cfg, err := loadConfig(func(name string) string {
		read[name] = true
		return env[name]
	})
	require.NoError(t, err, "service %s: its environment is not a valid configuration", s.Name)
	for name := range env {
		require.True(t, read[name], "service %s sets %s, which api does not read", s.Name, name)
	}
	return cfg
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

// requirePublishes fails unless the service listens on every interface of
// its container (a loopback address inside a container is reachable from
// nowhere else) on a port that compose publishes, on the host's loopback
// only.
func requirePublishes(t *testing.T, s types.ServiceConfig, listenAddr string) {
	t.Helper()
	host, port, err := net.SplitHostPort(listenAddr)
	require.NoError(t, err)
	require.Contains(t, []string{"", "0.0.0.0", "::"}, host, "service %s listens on %s: unreachable from outside its container", s.Name, listenAddr)
	for _, p := range s.Ports {
		if strconv.Itoa(int(p.Target)) == port {
			require.Equal(t, "127.0.0.1", p.HostIP, "service %s: port %s published beyond the host's loopback", s.Name, port)
			return
		}
	}
	t.Fatalf("service %s listens on %s, a port it does not publish", s.Name, listenAddr)
}

func TestCompose(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, false)

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
			require.Equal(t, name, cmd.name, "service %s: command %q", service, s.Command)
		}
	})

	t.Run("EnvironmentIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		for _, service := range servicesRunning(project, "api") {
			s, err := project.GetService(service)
			require.NoError(t, err)
			loadServiceConfig(t, s)
		}
	})

	t.Run("APIIsPublished", func(t *testing.T) {
		t.Parallel()
		s, err := project.GetService("api")
		require.NoError(t, err)
		cfg := loadServiceConfig(t, s)
		requirePublishes(t, s, cfg.ListenAddr)
		requirePublishes(t, s, cfg.MetricsAddr)
	})

	// Every service built from the Dockerfile names its binary: the
	// image's default command would silently serve the API.
	t.Run("EveryServiceOfTheImageNamesItsBinary", func(t *testing.T) {
		t.Parallel()
		binaries := []string{"api", "worker", "stripesim", "stripe-mock"}
		for name, s := range project.AllServices() {
			if s.Build == nil {
				continue
			}
			require.NotEmpty(t, s.Command, "service %s has no command", name)
			require.Contains(t, binaries, s.Command[0], "service %s runs no binary of the image", name)
		}
	})

	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		requireDependsOn(t, project, "migrate", map[string]string{"postgres": types.ServiceConditionHealthy})
		requireDependsOn(t, project, "demo-tenant", map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully})
		requireDependsOn(t, project, "api", map[string]string{"migrate": types.ServiceConditionCompletedSuccessfully})
		// service_healthy waits forever on a service without a health check.
		pg, err := project.GetService("postgres")
		require.NoError(t, err)
		require.NotNil(t, pg.HealthCheck, "postgres has no health check")
		require.False(t, pg.HealthCheck.Disable, "postgres's health check is disabled")
		require.Contains(t, pg.HealthCheck.Test, "pg_isready")
		// One-shots must not be restarted, or "completed" never comes.
		for _, oneShot := range []string{"migrate", "demo-tenant"} {
			s, err := project.GetService(oneShot)
			require.NoError(t, err)
			require.Contains(t, []string{"", "no"}, s.Restart, "one-shot %s is restarted", oneShot)
		}
	})
}
