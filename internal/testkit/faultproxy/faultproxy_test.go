package faultproxy_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
)

// echo serves lines back on a loopback port.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestCutEndsConnectionsAndRefusesNewOnesUntilRestored(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Start(echo(t))
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	got, err := roundTrip(c, "hello")
	require.NoError(t, err)
	require.Equal(t, "hello\n", got)

	p.Cut()
	_, err = roundTrip(c, "again")
	require.Error(t, err, "an open connection is cut")
	fresh, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err, "the listener still accepts")
	_, err = roundTrip(fresh, "refused")
	require.Error(t, err, "a new connection is closed at once")
	fresh.Close()
	require.Equal(t, 1, p.Cuts())

	p.Restore()
	again, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer again.Close()
	got, err = roundTrip(again, "back")
	require.NoError(t, err)
	require.Equal(t, "back\n", got)
}
