package faultproxy_test

import (
	"bufio"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
)

// echo serves lines back on a loopback port.
func echo(t *testing.T) string {
	addr, _ := recordingEcho(t)
	return addr
}

// recordingEcho is echo, also sending every line it received on lines.
func recordingEcho(t *testing.T) (string, <-chan string) {
	lines := make(chan string, 100)
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
					select {
					case lines <- line:
					default:
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
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

// A partition holds every byte while it lasts (the client's read times
// out, as against a peer that went silent) and cuts the connections open
// during it at its end; new connections then pass again.
func TestPartitionHoldsThenCuts(t *testing.T) {
	t.Parallel()
	p, c := proxied(t, echo(t))
	sendUnanswered(t, c, func() { p.PartitionFor(time.Second) }, "held\n", 300*time.Millisecond, func() {})

	fresh, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer fresh.Close()
	got, err := roundTrip(fresh, "back")
	require.NoError(t, err)
	require.Equal(t, "back\n", got)
	require.Equal(t, 1, p.Faults().Partitions)
}

// While answers are dropped, a request still reaches the peer (which acts
// on it) but its answer never comes back; the connection is cut at the end.
func TestDroppedAnswersArriveButAreNeverAnswered(t *testing.T) {
	t.Parallel()
	addr, received := recordingEcho(t)
	p, c := proxied(t, addr)
	sendUnanswered(t, c, func() { p.DropAnswersFor(time.Second) }, "commit\n", 500*time.Millisecond, func() {
		require.Equal(t, "commit\n", <-received, "the request arrived")
	})
	require.Equal(t, 1, p.Faults().DroppedAnswers)
}

// A latency spike delays each chunk both ways.
func TestLatencySpike(t *testing.T) {
	t.Parallel()
	p, c := proxied(t, echo(t))
	go p.DelayFor(time.Second, 100*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	got, err := roundTrip(c, "slow")
	require.NoError(t, err)
	require.Equal(t, "slow\n", got)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "a chunk each way, each delayed")
	require.Equal(t, 1, p.Faults().LatencySpikes)
}

// proxied starts a proxy to target and opens a connection through it.
func proxied(t *testing.T, target string) (*faultproxy.Proxy, net.Conn) {
	t.Helper()
	p, err := faultproxy.Start(target)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return p, c
}

// sendUnanswered sends a line during fault, started a moment before, and
// finds no answer within the wait; it returns once the fault has ended.
func sendUnanswered(t *testing.T, c net.Conn, fault func(), line string, wait time.Duration, sent func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fault(); close(done) }()
	time.Sleep(100 * time.Millisecond)
	_ = c.SetDeadline(time.Now().Add(wait))
	_, err := c.Write([]byte(line))
	require.NoError(t, err)
	sent()
	_, err = bufio.NewReader(c).ReadString('\n')
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "no answer during the fault")
	<-done
	_, err = roundTrip(c, "after")
	require.Error(t, err, "the connection is cut at the fault's end")
}
