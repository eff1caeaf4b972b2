package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/composecheck"
	"github.com/oncepay/oncepay/internal/serve"
)

// The stripesim service of docker-compose.yml, checked against the binary
// itself: a command it would refuse, a variable it does not read, or an
// address unreachable from outside its container breaks make test instead
// of the first compose up.

func TestCompose(t *testing.T) {
	t.Parallel()
	project := composecheck.Load(t, "../..", false)
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
		composecheck.Config(t, sim, "stripesim", loadConfig)
	})

	t.Run("EnvironmentOfTheComposeTestIsReadAndValid", func(t *testing.T) {
		t.Parallel()
		s, err := composecheck.Load(t, "../..", true).GetService("stripesim")
		require.NoError(t, err)
		require.Zero(t, composecheck.Config(t, s, "stripesim", loadConfig).SearchIndexDelay, "the override makes search immediate")
	})

	// The tests and the demo reach the admin API (/_sim/...) through the
	// published port.
	t.Run("IsPublished", func(t *testing.T) {
		t.Parallel()
		addr := composecheck.Config(t, sim, "stripesim", loadConfig).Addr
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
