// Package faultproxy is a TCP proxy that breaks the network between a
// process and its peer (a database) in the ways a real network does, for
// fault-injection tests and the chaos driver: every connection cut and new
// ones refused for a while; a partition, in which nothing passes and the
// peers learn it only when their connections are cut at its end; answers
// lost, in which requests still arrive (a COMMIT runs) but their answers
// never come back; and latency spikes. Only loopback targets make sense:
// it is a test instrument.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its address to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	// held is closed when a partition ends; nil when none is on.
	held chan struct{}
	// dropping answers: what the peer sends is discarded, and the
	// connections that lost some (tainted) are cut when it ends.
	dropping bool
	tainted  map[net.Conn]struct{}
	// latency delays every chunk, both ways, while a spike is on.
	latency time.Duration

	cuts, partitions, drops, spikes int
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, tainted: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting and cuts every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	return err
}

// Cut closes every open connection, both sides, and refuses new ones until
// Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	p.cuts++
	p.closeAll()
}

// closeAll closes every open connection; the caller holds mu.
func (p *Proxy) closeAll() {
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
		delete(p.tainted, c)
	}
}

// PartitionFor lets nothing through, either way, for d: connections stay
// open and new ones are accepted, but every byte waits, as when packets
// are lost and the peers keep waiting. At its end the connections open
// during it are cut, as peers whose patience ran out, and the bytes held
// are lost with them.
func (p *Proxy) PartitionFor(d time.Duration) {
	p.mu.Lock()
	held := make(chan struct{})
	p.held = held
	p.partitions++
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeAll()
	p.held = nil
	close(held)
}

// DropAnswersFor lets requests through for d but discards what the peer
// answers: a COMMIT arrives and commits, and its answer never reaches the
// client. At its end every connection that lost an answer is cut.
func (p *Proxy) DropAnswersFor(d time.Duration) {
	p.mu.Lock()
	p.dropping = true
	p.drops++
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropping = false
	for c := range p.tainted {
		c.Close()
		delete(p.conns, c)
		delete(p.tainted, c)
	}
}

// DelayFor delays every chunk, both ways, by latency for d: a latency
// spike, each round trip costing twice latency more.
func (p *Proxy) DelayFor(d, latency time.Duration) {
	p.mu.Lock()
	p.latency = latency
	p.spikes++
	p.mu.Unlock()
	time.Sleep(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = 0
}

// Restore accepts connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// CutFor cuts, waits d, then restores.
func (p *Proxy) CutFor(d time.Duration) {
	p.Cut()
	time.Sleep(d)
	p.Restore()
}

// Cuts counts the cuts so far.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// Faults counts each kind of fault so far.
type Faults struct{ Cuts, Partitions, DroppedAnswers, LatencySpikes int }

// Faults counts the faults so far.
func (p *Proxy) Faults() Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Faults{Cuts: p.cuts, Partitions: p.partitions, DroppedAnswers: p.drops, LatencySpikes: p.spikes}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		go p.pipe(c)
	}
}

// track registers c unless the proxy is down.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) pipe(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 3*time.Second)
	if err != nil || !p.track(server) {
		if server != nil {
			server.Close()
		}
		client.Close()
		return
	}
	go func() { p.forward(server, client, false); server.Close() }()
	p.forward(client, server, true)
	client.Close()
}

// forward copies src to dst, chunk by chunk, through the faults on at the
// time; answers is the direction from the peer back to the client.
func (p *Proxy) forward(dst, src net.Conn, answers bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			held, drop, latency := p.fate(answers, dst)
			if held != nil {
				<-held // the partition ended and cut this connection: the write fails
			}
			if latency > 0 {
				time.Sleep(latency)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// fate is what happens to a chunk about to be written to dst.
func (p *Proxy) fate(answers bool, dst net.Conn) (held chan struct{}, drop bool, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if answers && p.dropping {
		p.tainted[dst] = struct{}{}
		return nil, true, 0
	}
	return p.held, false, p.latency
}
