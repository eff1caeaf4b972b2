// Package composecheck loads docker-compose.yml the way Docker Compose does
// and checks a service against the binary it runs, for the compose tests
// of each cmd package: a command the binary would refuse, a variable it does
// not read or an address unreachable from outside its container breaks
// make test instead of the first compose up. Tests only.
package composecheck

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// Load loads docker-compose.yml (and the compose test's override when
// withTestOverride) from root, every profile enabled, with no variable from
// the environment the test runs in: each ${VAR} takes the file's own
// default.
func Load(t *testing.T, root string, withTestOverride bool) *types.Project {
	t.Helper()
	files := []string{root + "/docker-compose.yml"}
	if withTestOverride {
		files = append(files, root+"/deploy/compose.test.yml")
	}
	return load(t, root, files, types.Mapping{})
}

// LoadWithEnvironment is Load of docker-compose.yml alone, with env the
// variables of the environment compose runs in (as a shell line sets them
// before docker compose up).
func LoadWithEnvironment(t *testing.T, root string, env map[string]string) *types.Project {
	t.Helper()
	return load(t, root, []string{root + "/docker-compose.yml"}, types.Mapping(env))
}

func load(t *testing.T, root string, files []string, env types.Mapping) *types.Project {
	t.Helper()
	ctx := context.Background()
	details, err := loader.LoadConfigFiles(ctx, files, root)
	require.NoError(t, err)
	details.Environment = env
	project, err := loader.LoadWithContext(ctx, *details, loader.WithProfiles([]string{"*"}),
		func(o *loader.Options) { o.SetProjectName("oncepay", true) })
	require.NoError(t, err)
	return project
}

// Env is a service's environment with unset variables left out.
func Env(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

// Config loads a binary's configuration (its loadConfig) from the service's
// environment, and fails the test for a variable the service sets that the
// binary never reads (a misspelt name is silently ignored otherwise).
func Config[C any](t *testing.T, s types.ServiceConfig, binary string, load func(getenv func(string) string) (C, error)) C {
	t.Helper()
	env := Env(s)
	read := map[string]bool{}
	cfg, err := load(func(name string) string {
		read[name] = true
		return env[name]
	})
	require.NoError(t, err, "service %s: its environment is not a valid configuration", s.Name)
	for name := range env {
		require.True(t, read[name], "service %s sets %s, which %s does not read", s.Name, name, binary)
	}
	return cfg
}

// Publishes fails unless the service listens on every interface of its
// container (a loopback address inside a container is reachable from
// nowhere else) on a port compose publishes, on the host's loopback only.
func Publishes(t *testing.T, s types.ServiceConfig, listenAddr string) {
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

// ServicesRunning lists the services whose command runs binary.
func ServicesRunning(p *types.Project, binary string) []string {
	var running []string
	for name, s := range p.AllServices() {
		if len(s.Command) > 0 && s.Command[0] == binary {
			running = append(running, name)
		}
	}
	return running
}
