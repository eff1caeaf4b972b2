package main

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/serve"
)

// The stripesim service of docker-compose.yml, checked against the binary
// itself: a command it would refuse, a variable it does not read, or an
// address unreachable from outside its container breaks make test instead
// of the first compose up.

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

// loadServiceConfig loads the simulator's configuration from the service's
// environment and fails the test for a variable that it sets and the
// simulator never reads (a misspelt name is silently ignored otherwise).
func loadServiceConfig(t *testing.T, s types.ServiceConfig) config {
	t.Helper()
	read := map[string]bool{}
	cfg, err := loadConfig(func(name string) string {
		read[name] = true
		if v := s.Environment[name]; v != nil {
			return *v
		}
		return ""
	})
	require.NoError(t, err, "service %s: its environment is not a valid configuration", s.Name)
	for name := range s.Environment {
		require.True(t, read[name], "service %s sets %s, which stripesim does not read", s.Name, name)
	}
	return cfg
}

func TestCompose(t *testing.T) {
	t.Parallel()
	project := loadCompose(t, false)
	sim, err := project.GetService("stripesim")
	require.NoError(t, err)

	t.Run("OneServiceRunsTheSimulator", func(t *testing.T) {
		t.Parallel()
		var running []string
		for name, s := range project.AllServices() {
			if len(s.Command) > 0 && s.Command[0] == "stripesim" {
				running = append(running, name)
			}
		}
		require.Equal(t, []string{"stripesim"}, running)
	})

	t.Run("CommandIsAccepted", func(t *testing.T) {
		t.Parallel()
		help, err := serve.ParseNoArgs(sim.Command)
		require.NoError(t, err, "command %q", sim.Command)
		require.False(t, help, "command %q prints help and exits", sim.Command)
	})

	t.Run("EnvironmentIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		loadServiceConfig(t, sim)
	})

	t.Run("EnvironmentOfTheComposeTestIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		s, err := loadCompose(t, true).GetService("stripesim")
		require.NoError(t, err)
		require.Zero(t, loadServiceConfig(t, s).SearchIndexDelay, "the override makes search immediate")
	})

	// The tests and the demo reach the admin API (/_sim/...) through the
	// published port.
	t.Run("IsPublished", func(t *testing.T) {
		t.Parallel()
		addr := loadServiceConfig(t, sim).Addr
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		require.Contains(t, []string{"", "0.0.0.0", "::"}, host, "STRIPESIM_ADDR=%s is unreachable from outside the container", addr)
		require.Len(t, sim.Ports, 1)
		require.Equal(t, port, strconv.Itoa(int(sim.Ports[0].Target)), "published port")
		require.Equal(t, "127.0.0.1", sim.Ports[0].HostIP, "published on the host's loopback only")
	})

	// Nothing waits for the simulator but the worker, which only needs it
	// started; the simulator itself needs nothing.
	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, sim.DependsOn)
	})
}
