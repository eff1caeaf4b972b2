package operator

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlagsInterleaveWithArguments: flags may come before, between or
// after a command's arguments; a missing or extra argument, or a flag's
// value the command refuses, is refused with the command's usage.
func TestFlagsInterleaveWithArguments(t *testing.T) {
	t.Parallel()
	cmd, err := Parse([]string{"api", "keys", "release", "--reason", "r", "acme", "--operator=o", "key-0000000000000001", "--json"}, Variables{}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"acme", "key-0000000000000001"}, cmd.args)
	require.Equal(t, options{json: true, reason: "r", operator: "o"}, cmd.opts)
	for _, args := range []string{"payments show", "payments show a b", "reconcile", "findings resolve x --note n", "ledger check --since soon",
		"ledger check --since 1h --until 2h", "tenants rotate-key x --grace -1h", "findings list --limit 0"} {
		_, err := Parse(append([]string{"api"}, strings.Fields(args)...), Variables{}, nil)
		require.ErrorContains(t, err, "usage: api", args)
	}
}
