package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseConninfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     conninfo
	}{
		{"Empty", "  ", nil},
		{"SpacesAroundEquals", "host = a  port=1\t", conninfo{{"host", "a"}, {"port", "1"}}},
		{"EmptyValues", "b='' c=", conninfo{{"b", ""}, {"c", ""}}},
		{"ValueAfterSpaces", "a= b=''", conninfo{{"a", "b=''"}}},
		{"Quoted", `options='-c x=1' q='it\'s \\'`, conninfo{{"options", "-c x=1"}, {"q", `it's \`}}},
		{"EscapedSpaceUnquoted", `a=x\ y`, conninfo{{"a", "x y"}}},
		{"TrailingBackslashDropped", `a=x\`, conninfo{{"a", "x"}}},
		{"QuoteInsideUnquoted", `a=x'y`, conninfo{{"a", "x'y"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConninfo(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, in := range []string{"postgres://a@b/c", "host", "host a", "=a", "a='b", `a='b\'`} {
		_, err := parseConninfo(in)
		require.Error(t, err, in)
	}
}

func TestConninfoThroughKeepsEveryOtherParameter(t *testing.T) {
	t.Parallel()
	// As pg_auto_failover writes a standby's primary_conninfo, with a
	// password and options that need quoting and escaping.
	written := `host=127.0.0.1 port=46001 user=pgautofailover_replicator dbname=postgres ` +
		`application_name=pgautofailover_standby_2 sslmode=disable options='-c wal_sender_timeout=30s' password='it\'s \\ x'`
	through, err := conninfoThrough(written, "127.0.0.1:41234")
	require.NoError(t, err)
	got, err := parseConninfo(through)
	require.NoError(t, err)
	require.Equal(t, conninfo{{"host", "127.0.0.1"}, {"port", "41234"}, {"user", "pgautofailover_replicator"}, {"dbname", "postgres"},
		{"application_name", "pgautofailover_standby_2"}, {"sslmode", "disable"}, {"options", "-c wal_sender_timeout=30s"},
		{"password", `it's \ x`}}, got)

	t.Run("HostaddrToo", func(t *testing.T) {
		t.Parallel()
		through, err := conninfoThrough("hostaddr=10.0.0.2 host=db port=5432 port=5433 user=r", "127.0.0.1:9")
		require.NoError(t, err)
		got, err := parseConninfo(through)
		require.NoError(t, err)
		require.Equal(t, conninfo{{"hostaddr", "127.0.0.1"}, {"host", "127.0.0.1"}, {"port", "9"}, {"user", "r"}}, got)
	})
	t.Run("NoHostGiven", func(t *testing.T) {
		t.Parallel()
		through, err := conninfoThrough("user=r", "127.0.0.1:9")
		require.NoError(t, err)
		require.Equal(t, "user='r' host='127.0.0.1' port='9'", through)
	})
	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		_, err := conninfoThrough("postgres://r@db/x", "127.0.0.1:9")
		require.ErrorContains(t, err, "URI")
		_, err = conninfoThrough("host=db", "localhost:9")
		require.ErrorContains(t, err, "IP address")
	})
}

// FuzzParseConninfo: the parser never panics, and what it accepts, written
// back, reads back the same.
func FuzzParseConninfo(f *testing.F) {
	for _, seed := range []string{"host=a port=1", `a='b\'c' d=e\ f`, "a= b=''", `a=x\`, "postgres://x", "a='"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseConninfo(s)
		if err != nil {
			return
		}
		again, err := parseConninfo(c.String())
		require.NoError(t, err, "%q written back as %q", s, c.String())
		require.Equal(t, c, again, "%q written back as %q", s, c.String())
	})
}
