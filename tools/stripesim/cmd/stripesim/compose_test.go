package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/serve"
	"github.com/oncepay/oncepay/internal/testkit/composecheck"
)

// The stripesim service of docker-compose.yml, checked against the binary
// itself: a command it would refuse, a variable it does not read, or an
// address unreachable from outside its container breaks make test instead
// of the first compose up.

func TestCompose(t *testing.T) {
	t.Parallel()
	project := composecheck.Load(t, "../../../..", false)
	sim, err := project.GetService("stripesim")
	require.NoError(t, err)

	t.Run("OneServiceRunsTheSimulator", func(t *testing.T) {
		t.Parallel()
		running := composecheck.ServicesRunning(project, "stripesim")
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
		s, err := composecheck.Load(t, "../../../..", true).GetService("stripesim")
		require.NoError(t, err)
		require.Zero(t, composecheck.Config(t, s, "stripesim", loadConfig).SearchIndexDelay, "the override makes search immediate")
	})

	// The tests and the demo reach the admin API (/_sim/...) through the
	// published port.
	t.Run("IsPublished", func(t *testing.T) {
		t.Parallel()
		addr := composecheck.Config(t, sim, "stripesim", loadConfig).Addr
		require.Len(t, sim.Ports, 1)
		composecheck.Publishes(t, sim, addr)
	})

	// Nothing waits for the simulator but the worker, which only needs it
	// started; the simulator itself needs nothing.
	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, sim.DependsOn)
	})
}
