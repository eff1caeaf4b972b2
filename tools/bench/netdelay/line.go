package netdelay

import (
	"errors"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Line forwards the connections its listener accepts to a server, holds
// each of the server's answers for its delay (zero: none), and counts the
// round trips it carries.
//
// A round trip is a client's request after an answer: bytes from the
// client when the server has spoken since the client last did. Requests a
// client sends together (a pipeline, a batch) are one round trip, as they
// are on a network.
type Line struct {
	ln     net.Listener
	target string
	// delay is the round trip's added time, in nanoseconds, all of it on
	// the answers: one wait per round trip, not two. elsewhere is a delay
	// added on the way by something else (netem): not applied here, but
	// counted in busy as delay is.
	delay, elsewhere atomic.Int64

	roundTrips atomic.Int64
	// census counts round trips by what starts them (census.go);
	// statements is the SQL of the prepared statements seen, by name.
	censusMu   sync.Mutex
	census     map[string]int64
	statements map[string]string
	// busy is the nanoseconds connections waited for answers: from a
	// request's arrival to its answer's delivery, summed over round trips.
	busy      atomic.Int64
	open      atomic.Int64
	peak      atomic.Int64
	mu        sync.Mutex
	links     map[*link]struct{}
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// answer is a chunk of the server's bytes on its way to a client, and
// when it is due there.
type answer struct {
	due  time.Time
	data []byte
}

// link is one client connection and its connection to the server.
type link struct {
	client, server net.Conn
	// out carries the server's answers to the client's writer, in order.
	out  chan answer
	done chan struct{}
	once sync.Once
	// answered says the server spoke since the client's last request; sent
	// is when that request arrived (nanoseconds since the Unix epoch).
	answered atomic.Bool
	sent     atomic.Int64
}

func (k *link) close() {
	k.once.Do(func() {
		close(k.done)
		k.client.Close()
		k.server.Close()
	})
}

// Stats are a line's counts since it started.
type Stats struct {
	// RoundTrips is the requests that followed an answer.
	RoundTrips int64
	// Busy is the time connections waited for answers, summed: over a
	// window, its growth divided by the window is the mean number of
	// connections busy on the wire (Little's law).
	Busy time.Duration
	// Open is the connections open now, Peak the most open at once since
	// the last ResetPeak.
	Open, Peak int64
}

// NewLine serves ln, forwarding to target (host:port), until Close.
func NewLine(ln net.Listener, target string) *Line {
	l := &Line{ln: ln, target: target, links: map[*link]struct{}{}, closed: make(chan struct{}),
		census: map[string]int64{}, statements: map[string]string{}}
	l.wg.Add(1)
	go func() { defer l.wg.Done(); l.accept() }()
	return l
}

// Addr is where clients connect.
func (l *Line) Addr() net.Addr { return l.ln.Addr() }

// SetDelay sets the time added to every round trip from now on.
func (l *Line) SetDelay(d time.Duration) { l.delay.Store(int64(max(d, 0))) }

// SetDelayElsewhere tells the line of a delay added to every round trip
// on the way (netem), which it counts in Busy but does not add.
func (l *Line) SetDelayElsewhere(d time.Duration) { l.elsewhere.Store(int64(max(d, 0))) }

// Stats reads the counts.
func (l *Line) Stats() Stats {
	return Stats{RoundTrips: l.roundTrips.Load(), Busy: time.Duration(l.busy.Load()), Open: l.open.Load(), Peak: l.peak.Load()}
}

// Census counts the round trips so far by what starts them: the first
// message a client sends in each (see firstMessage).
func (l *Line) Census() map[string]int64 {
	l.censusMu.Lock()
	defer l.censusMu.Unlock()
	return maps.Clone(l.census)
}

// censusLabels and censusStatements bound the census: a client sending
// ever new SQL cannot grow it without end.
const (
	censusLabels     = 256
	censusStatements = 4096
)

// count adds to the census the round trip b starts, after learning the
// statements it prepares.
func (l *Line) count(b []byte, first bool) {
	l.censusMu.Lock()
	defer l.censusMu.Unlock()
	parsed(b, func(name, sql string) {
		if len(l.statements) < censusStatements {
			l.statements[name] = sql
		}
	})
	label := firstMessage(b, first, func(name string) string { return l.statements[name] })
	if _, ok := l.census[label]; !ok && len(l.census) >= censusLabels {
		label = "other"
	}
	l.census[label]++
}

// ResetPeak starts the peak of open connections again from those open now.
func (l *Line) ResetPeak() { l.peak.Store(l.open.Load()) }

// Close stops accepting, closes every connection and waits for the line's
// goroutines.
func (l *Line) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.ln.Close()
		l.mu.Lock()
		for k := range l.links {
			k.close()
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
	return err
}

func (l *Line) accept() {
	for {
		client, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A connection that failed before it was accepted: the
			// listener goes on.
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.serve(client)
		}()
	}
}

func (l *Line) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	k := &link{client: client, server: server, out: make(chan answer, 256), done: make(chan struct{})}
	k.answered.Store(true)
	l.mu.Lock()
	select {
	case <-l.closed:
		l.mu.Unlock()
		k.close()
		return
	default:
	}
	l.links[k] = struct{}{}
	l.mu.Unlock()
	open := l.open.Add(1)
	for peak := l.peak.Load(); open > peak && !l.peak.CompareAndSwap(peak, open); peak = l.peak.Load() {
	}
	defer func() {
		k.close()
		l.open.Add(-1)
		l.mu.Lock()
		delete(l.links, k)
		l.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.requests(k) }()
	go func() { defer wg.Done(); l.writeAnswers(k) }()
	l.readAnswers(k)
	wg.Wait()
}

// requests copies the client's bytes to the server as they come, and
// counts a round trip for each request that follows an answer.
func (l *Line) requests(k *link) {
	defer k.close()
	buf := make([]byte, 32<<10)
	for first := true; ; {
		n, err := k.client.Read(buf)
		if n > 0 {
			if k.answered.Swap(false) {
				k.sent.Store(time.Now().UnixNano())
				l.roundTrips.Add(1)
				l.count(buf[:n], first)
				first = false
			}
			if _, werr := k.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// readAnswers reads the server's bytes as they come, and hands each chunk
// to the client's writer with the time it is due: read at once, so that a
// chunk's time is when the server sent it, whatever the writer is waiting
// for.
func (l *Line) readAnswers(k *link) {
	defer k.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := k.server.Read(buf)
		if n > 0 {
			now, delay := time.Now(), time.Duration(l.delay.Load())
			if !k.answered.Swap(true) {
				l.busy.Add(now.UnixNano() - k.sent.Load() + int64(delay) + l.elsewhere.Load())
			}
			select {
			case k.out <- answer{due: now.Add(delay), data: append([]byte(nil), buf[:n]...)}:
			case <-k.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// writeAnswers writes each answer to the client at its time. It sleeps
// with nanosleep, on whatever thread it runs: Go's timers wake on the
// network poller's millisecond here (a 250 µs sleep took 1.09 ms), too
// coarse for the round trips priced; nanosleep ends within tens of
// microseconds. Answers are due in the order they were read (the delay is
// the same for all), so one writer keeps them in order.
func (l *Line) writeAnswers(k *link) {
	for {
		var a answer
		select {
		case a = <-k.out:
		case <-k.done:
			return
		}
		if wait := time.Until(a.due); wait > 0 {
			ts := unix.NsecToTimespec(int64(wait))
			for unix.Nanosleep(&ts, &ts) == unix.EINTR {
			}
		}
		if _, err := k.client.Write(a.data); err != nil {
			k.close()
			return
		}
	}
}
