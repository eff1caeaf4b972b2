package envconfig_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/platform/envconfig"
)

func TestReader(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"D": "2s", "N": "7", "S": "x", "U": "http://127.0.0.1:1", "L": "warn"}
	env := envconfig.New(func(k string) string { return vars[k] })
	require.Equal(t, 2*time.Second, env.Duration("D", time.Hour, 0, time.Minute))
	require.Equal(t, time.Hour, env.Duration("UNSET", time.Hour, 0, 2*time.Hour))
	require.Equal(t, 7, env.Int("N", 1, 0, 10))
	require.Equal(t, "x", env.String("S", "def"))
	require.Equal(t, "def", env.String("UNSET", "def"))
	require.Equal(t, "http://127.0.0.1:1", env.URL("U"))
	require.Equal(t, "warn", env.OneOf("L", "info", "info", "warn"))
	require.NoError(t, env.Err())

	vars = map[string]string{"D": "soon", "D2": "2h", "N": "eleven", "U": "ftp://x", "L": "loud"}
	env = envconfig.New(func(k string) string { return vars[k] })
	env.Duration("D", 0, 0, time.Hour)
	env.Duration("D2", 0, 0, time.Hour)
	env.Int("N", 0, 0, 10)
	env.URL("U")
	env.OneOf("L", "info", "info")
	env.Required("R", "needed")
	err := env.Err()
	for _, name := range []string{"D:", "D2:", "N:", "U:", "L:", "R:"} {
		require.ErrorContains(t, err, name)
	}
}

func TestNamesListsWhatLoadReads(t *testing.T) {
	t.Parallel()
	load := func(getenv func(string) string) (struct{}, error) {
		r := envconfig.New(getenv)
		r.String("B_VAR", "x")
		r.Duration("A_VAR", time.Second, 0, time.Hour)
		r.Required("C_VAR", "needed")
		return struct{}{}, r.Err()
	}
	require.Equal(t, []string{"A_VAR", "B_VAR", "C_VAR"}, envconfig.Names(load))
}
