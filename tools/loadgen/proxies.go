package loadgen

import (
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/testkit/faultproxy"
)

// proxies stand between the processes and the database, one a server (the
// formation's nodes, or the one server): a fault breaks every one at once.
type proxies []*faultproxy.Proxy

// all runs fault on every proxy at once and returns when each has ended.
func (ps proxies) all(fault func(p *faultproxy.Proxy)) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { fault(p) })
	}
	wg.Wait()
}

func (ps proxies) CutFor(d time.Duration) { ps.all(func(p *faultproxy.Proxy) { p.CutFor(d) }) }
func (ps proxies) PartitionFor(d time.Duration) {
	ps.all(func(p *faultproxy.Proxy) { p.PartitionFor(d) })
}
func (ps proxies) DropAnswersFor(d time.Duration) {
	ps.all(func(p *faultproxy.Proxy) { p.DropAnswersFor(d) })
}
func (ps proxies) DelayFor(d, latency time.Duration) {
	ps.all(func(p *faultproxy.Proxy) { p.DelayFor(d, latency) })
}
func (ps proxies) Restore() { ps.all(func(p *faultproxy.Proxy) { p.Restore() }) }

func (ps proxies) Close() {
	for _, p := range ps {
		_ = p.Close()
	}
}

// Faults counts each kind of fault once, however many proxies it broke.
func (ps proxies) Faults() faultproxy.Faults {
	if len(ps) == 0 {
		return faultproxy.Faults{}
	}
	return ps[0].Faults()
}
