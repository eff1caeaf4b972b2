package postgres

import (
	"cmp"
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConnectionsNoticeADeadServer: every connection's socket probes a
// silent server and gives up on unacknowledged data within the configured
// times, so a failover's dead primary is noticed in seconds. The socket is
// dialled as the configuration dials any connection, to a TCP listener of
// the test's own: what is checked is the client's side.
func TestConnectionsNoticeADeadServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 4)
	t.Cleanup(func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for name, cfg := range map[string]PoolConfig{
		"Defaults":   {},
		"Configured": {KeepAlive: 2 * time.Second, TCPUserTimeout: 7 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.URL = "postgres://postgres@" + ln.Addr().String() + "/oncepay"
			ccfg, err := ConnConfig(cfg)
			require.NoError(t, err)
			conn, err := ccfg.DialFunc(context.Background(), "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			raw, err := conn.(*net.TCPConn).SyscallConn()
			require.NoError(t, err)
			opt := func(level, name int) (v int) {
				require.NoError(t, raw.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), level, name) }))
				require.NoError(t, err)
				return v
			}
			keepAlive := cmp.Or(cfg.KeepAlive, DefaultKeepAlive)
			userTimeout := cmp.Or(cfg.TCPUserTimeout, DefaultTCPUserTimeout)
			require.Equal(t, 1, opt(syscall.SOL_SOCKET, syscall.SO_KEEPALIVE))
			require.Equal(t, int(keepAlive.Seconds()), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE))
			require.Equal(t, int(keepAlive.Seconds()), opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL))
			require.Equal(t, keepAliveProbes, opt(syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT))
			require.Equal(t, int(userTimeout.Milliseconds()), opt(syscall.IPPROTO_TCP, tcpUserTimeout))
		})
	}
}
