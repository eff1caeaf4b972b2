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
	p, err := faultproxy.Start(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()

	done := make(chan struct{})
	go func() { p.PartitionFor(time.Second); close(done) }()
	time.Sleep(100 * time.Millisecond)
	_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = c.Write([]byte("held\n"))
	require.NoError(t, err)
	_, err = bufio.NewReader(c).ReadString('\n')
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "nothing comes back during the partition")
	<-done
	_, err = roundTrip(c, "after")
	require.Error(t, err, "the connection is cut at the partition's end")

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
	p, err := faultproxy.Start(addr)
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()

	done := make(chan struct{})
	go func() { p.DropAnswersFor(time.Second); close(done) }()
	time.Sleep(100 * time.Millisecond)
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = c.Write([]byte("commit\n"))
	require.NoError(t, err)
	require.Equal(t, "commit\n", <-received, "the request arrived")
	_, err = bufio.NewReader(c).ReadString('\n')
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "its answer did not")
	<-done
	_, err = roundTrip(c, "after")
	require.Error(t, err, "a connection that lost an answer is cut")
	require.Equal(t, 1, p.Faults().DroppedAnswers)
}

// A latency spike delays each chunk both ways.
func TestLatencySpike(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Start(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()

	go p.DelayFor(time.Second, 100*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	got, err := roundTrip(c, "slow")
	require.NoError(t, err)
	require.Equal(t, "slow\n", got)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "a chunk each way, each delayed")
	require.Equal(t, 1, p.Faults().LatencySpikes)
}
