package netdelay

import (
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers every read with the same bytes, until the test ends.
func echoServer(t *testing.T) string { return echoServerAfter(t, 0) }

// echoServerAfter echoes as echoServer does, but answers nothing on a
// connection until its first gathered bytes have all arrived.
func echoServerAfter(t *testing.T, gathered int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				first := make([]byte, gathered)
				if _, err := io.ReadFull(conn, first); err != nil {
					return
				}
				if _, err := conn.Write(first); err != nil {
					return
				}
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrips sends n one-byte requests on conn, each after the answer to
// the one before, and returns each round trip's time, sorted.
func roundTrips(t *testing.T, conn net.Conn, n int) []time.Duration {
	t.Helper()
	took := make([]time.Duration, n)
	buf := make([]byte, 1)
	for i := range took {
		start := time.Now()
		_, err := conn.Write([]byte{'x'})
		require.NoError(t, err)
		_, err = io.ReadFull(conn, buf)
		require.NoError(t, err)
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	return took
}

// lineTo starts a line on a loopback port to target, closed when the test
// ends.
func lineTo(t *testing.T, target string) *Line {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	line := NewLine(ln, target)
	t.Cleanup(func() { line.Close() })
	return line
}

// TestLineDelaysEachRoundTrip: with a delay set, every round trip through
// the line takes at least that long, and is delayed once, not twice (the
// median under twice the delay, which a loaded machine's scheduling stays
// within); each is counted once, and the time connections waited is the
// round trips' time.
func TestLineDelaysEachRoundTrip(t *testing.T) {
	t.Parallel()
	line := lineTo(t, echoServer(t))
	conn, err := net.Dial("tcp", line.Addr().String())
	require.NoError(t, err)
	defer conn.Close()

	plain := roundTrips(t, conn, 50)
	require.Less(t, plain[len(plain)/2], time.Millisecond, "no delay set: a loopback round trip")
	require.EqualValues(t, 50, line.Stats().RoundTrips)

	const delay = 2 * time.Millisecond
	line.SetDelay(delay)
	before := line.Stats()
	delayed := roundTrips(t, conn, 100)
	require.GreaterOrEqual(t, delayed[0], delay, "no round trip is faster than the delay")
	require.Less(t, delayed[len(delayed)/2], 2*delay)
	after := line.Stats()
	require.EqualValues(t, 100, after.RoundTrips-before.RoundTrips)
	var sum time.Duration
	for _, d := range delayed {
		sum += d
	}
	// Busy is counted from the request's arrival at the line to the
	// answer's time: within each round trip as the client saw it.
	busy := after.Busy - before.Busy
	require.GreaterOrEqual(t, busy, 100*delay)
	require.LessOrEqual(t, busy, sum)
}

// TestLineCountsABatchAsOneRoundTrip: requests sent together, before any
// answer, are one round trip, as a pipeline is on a network. The server
// answers once all three have arrived, so that none is answered before the
// next is sent, however the machine schedules the test.
func TestLineCountsABatchAsOneRoundTrip(t *testing.T) {
	t.Parallel()
	line := lineTo(t, echoServerAfter(t, 3))
	conn, err := net.Dial("tcp", line.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	for range 3 {
		_, err := conn.Write([]byte("a"))
		require.NoError(t, err)
	}
	_, err = io.ReadFull(conn, make([]byte, 3))
	require.NoError(t, err)
	roundTrips(t, conn, 1)
	require.EqualValues(t, 2, line.Stats().RoundTrips)
}

// TestLineCountsConnectionsAndCloses: the line counts the connections open
// and the most at once, and Close ends them all.
func TestLineCountsConnectionsAndCloses(t *testing.T) {
	t.Parallel()
	line := lineTo(t, echoServer(t))
	var conns []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", line.Addr().String())
		require.NoError(t, err)
		roundTrips(t, conn, 1) // served: the line has its server connection
		conns = append(conns, conn)
	}
	require.Equal(t, Stats{RoundTrips: 3, Busy: line.Stats().Busy, Open: 3, Peak: 3}, line.Stats())
	conns[0].Close()
	require.Eventually(t, func() bool { return line.Stats().Open == 2 }, 5*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 3, line.Stats().Peak)
	line.ResetPeak()
	require.EqualValues(t, 2, line.Stats().Peak)

	require.NoError(t, line.Close())
	_ = conns[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := conns[1].Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the line closed its connections")
	// Its listener is closed. (Not proven by a dial: another test's
	// listener may take the freed port at once.)
	_, err = line.ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed, "the line no longer listens")
}

// TestLineRefusesWhatItCannotReach: a client of a line whose server does
// not answer is closed at once, and the line goes on serving.
func TestLineRefusesWhatItCannotReach(t *testing.T) {
	t.Parallel()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	target := gone.Addr().String()
	gone.Close()
	line := lineTo(t, target)
	conn, err := net.Dial("tcp", line.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.EqualValues(t, 0, line.Stats().Open)
}

func median(sorted []time.Duration) time.Duration { return sorted[len(sorted)/2] }
