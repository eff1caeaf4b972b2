package netdelay

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// message is a frontend message: its type, its length and its body.
func message(kind byte, body string) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

func TestFirstMessage(t *testing.T) {
	t.Parallel()
	parse := message('P', "stmtcache_1\x00INSERT INTO idempotency_keys (tenant_id,\n\t idempotency_key) VALUES ($1, $2)\x00\x00\x00")
	bind := append(message('B', "\x00stmtcache_1\x00\x00\x00"), message('E', "\x00\x00\x00\x00\x00")...)
	for name, c := range map[string]struct {
		b     []byte
		first bool
		want  string
	}{
		"Startup":         {[]byte{0, 0, 0, 8, 4, 210, 22, 47}, true, "startup"},
		"Ping":            {message('Q', "-- ping\x00"), false, "query: -- ping"},
		"Begin":           {message('Q', "begin\x00"), false, "query: begin"},
		"PrepareInABatch": {append(parse, bind...), false, "prepare: INSERT INTO idempotency_keys (tenant_id, idempot"},
		"Execute":         {bind, false, "execute"},
		"ExecuteKnown":    {message('B', "\x00stmtcache_2\x00\x00\x00"), false, "execute: SELECT 2"},
		"Sync":            {message('S', ""), false, "message S"},
		"Short":           {[]byte{'Q', 0, 0}, false, "unreadable"},
		"BadLength":       {[]byte{'Q', 0, 0, 0, 2}, false, "unreadable"},
		"NotAType":        {message(0, "x"), false, "unreadable"},
		"CutShort":        {message('Q', "SELECT 1\x00")[:9], false, "query: SELE"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			known := func(name string) string { return map[string]string{"stmtcache_2": "SELECT 2"}[name] }
			require.Equal(t, c.want, firstMessage(c.b, c.first, known))
		})
	}
}

// TestLineTakesACensus: a line counts its round trips by what starts them.
func TestLineTakesACensus(t *testing.T) {
	t.Parallel()
	line := lineTo(t, echoServer(t))
	conn, err := net.Dial("tcp", line.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	prepare := append(message('P', "s1\x00SELECT 1\x00\x00\x00"), message('B', "\x00s1\x00")...)
	for _, b := range [][]byte{{0, 0, 0, 8, 4, 210, 22, 47}, message('Q', "-- ping\x00"), message('Q', "-- ping\x00"),
		message('B', "\x00s\x00"), prepare, message('B', "\x00s1\x00")} {
		_, err := conn.Write(b)
		require.NoError(t, err)
		_, err = io.ReadFull(conn, make([]byte, len(b)))
		require.NoError(t, err)
	}
	require.Equal(t, map[string]int64{"startup": 1, "query: -- ping": 2, "execute": 1, "prepare: SELECT 1": 1, "execute: SELECT 1": 1},
		line.Census())
}

// FuzzFirstMessage: any bytes get a label, short and valid UTF-8, and
// never a panic.
func FuzzFirstMessage(f *testing.F) {
	f.Add(message('Q', "SELECT 1\x00"), false)
	f.Add(message('P', "s\x00SELECT $1\x00\x00\x00"), false)
	f.Add([]byte{'P', 0, 0, 0, 4}, false)
	f.Add([]byte{'P', 255, 255, 255, 255, 'x'}, false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, b []byte, first bool) {
		seen := map[string]string{}
		parsed(b, func(name, sql string) {
			require.NotEmpty(t, name)
			require.LessOrEqual(t, len(sql), 48)
			seen[name] = sql
		})
		label := firstMessage(b, first, func(name string) string { return seen[name] })
		require.NotEmpty(t, label)
		require.LessOrEqual(t, len(label), len("execute: ")+48)
		require.True(t, utf8.ValidString(label))
	})
}
