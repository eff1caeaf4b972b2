// Package faultproxy is a TCP proxy that can cut every connection through
// it and refuse new ones for a while: a database (or any peer) becoming
// unreachable mid-conversation, for fault-injection tests and the chaos
// driver. Only loopback targets make sense: it is a test instrument.
package faultproxy

import (
	"errors"
	"io"
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
	cuts  int
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
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
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
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
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	_, _ = io.Copy(client, server)
	client.Close()
}
