package postgres_test

import (
	"cmp"
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/postgres"
	"github.com/oncepay/oncepay/internal/testkit/pgtest"
)

// TestConnectionsNoticeADeadServer: every connection's socket probes a
// silent server and gives up on unacknowledged data within the configured
// times, so a failover's dead primary is noticed in seconds.
func TestConnectionsNoticeADeadServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, cfg := range map[string]postgres.PoolConfig{
		"Defaults":   {},
		"Configured": {KeepAlive: 2 * time.Second, TCPUserTimeout: 7 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.URL = pgtest.SharedDatabase(t)
			parsed, err := pgx.ParseConfig(cfg.URL)
			require.NoError(t, err)
			if parsed.Host == "" || parsed.Host[0] == '/' {
				t.Skipf("the test database is reached over a Unix socket (%s): no TCP to tune", parsed.Host)
			}
			pool, err := postgres.Open(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			raw, err := conn.Conn().PgConn().Conn().(*net.TCPConn).SyscallConn()
			require.NoError(t, err)
			opt := func(level, name int) (v int) {
				require.NoError(t, raw.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), level, name) }))
				require.NoError(t, err)
				return v
			}
			keepAlive := cmp.Or(cfg.KeepAlive, postgres.DefaultKeepAlive)
			userTimeout := cmp.Or(cfg.TCPUserTimeout, postgres.DefaultTCPUserTimeout)
			require.Equal(t, 1, opt(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE))
			require.Equal(t, int(keepAlive.Seconds()), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE))
			require.Equal(t, int(keepAlive.Seconds()), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL))
			require.Equal(t, 3, opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT))
			require.Equal(t, int(userTimeout.Milliseconds()), opt(syscall.IPPROTO_TCP, 0x12 /* TCP_USER_TIMEOUT */))
		})
	}
}
