package testenv

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Direction is one way through a Proxy.
type Direction int

// Directions. Both is Up and Down.
const (
	// Up is client to server.
	Up Direction = 1 << iota
	// Down is server to client.
	Down
	Both = Up | Down
)

// Proxy is a TCP proxy between clients and one server, for network faults
// in tests: per direction it adds latency or blackholes (accepts, and
// forwards nothing until healed), and it can drop (close) connections.
// Faults change at run time and apply to open connections too. Bytes
// held back by a blackhole are delivered, in order, after Heal, as TCP
// would after a partition heals: a stream is delayed, never corrupted.
type Proxy struct {
	// Addr is where clients connect (127.0.0.1:port).
	Addr   string
	target string
	l      net.Listener

	mu sync.Mutex
	// latency and blackhole are the faults of Up and Down (index 0, 1).
	latency   [2]time.Duration
	blackhole [2]bool
	// dropping closes every connection accepted until Heal.
	dropping bool
	// changed is closed and replaced at every change, to wake the pumps.
	changed chan struct{}
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type proxyConn struct{ client, server net.Conn }

func (c *proxyConn) close() {
	_ = c.client.Close()
	_ = c.server.Close()
}

// StartProxy starts a proxy to target (host:port) on a free loopback port
// and closes it at t's cleanup.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy: %v", err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		drop, closed := p.dropping, p.closed
		p.mu.Unlock()
		if drop || closed {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &proxyConn{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.close()
			return
		}
		p.conns[pc] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(pc, c, s, 0)
		go p.pump(pc, s, c, 1)
	}
}

// chunk is bytes read at a time, delivered at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst for direction d (0 Up, 1 Down): a reader stamps
// each chunk with its due time (read time plus the latency then), a
// writer delivers it then, so that latency delays the stream without
// lowering its throughput. Both wait while d is blackholed.
func (p *Proxy) pump(pc *proxyConn, src, dst net.Conn, d int) {
	defer p.wg.Done()
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			if !p.waitOpen(d, pc) {
				return
			}
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.latency[d])
				p.mu.Unlock()
				chunks <- chunk{buf[:n], due}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if !p.waitOpen(d, pc) {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	// Close both ways (the other pump ends too) and drain the reader,
	// which ends once its Read fails or it sees the connection gone.
	p.forget(pc)
	for range chunks { //nolint:revive // draining
	}
}

// forget closes pc and removes it, waking pumps waiting on a blackhole.
func (p *Proxy) forget(pc *proxyConn) {
	p.set(func() { delete(p.conns, pc) })
	pc.close()
}

// waitOpen waits while direction d is blackholed; false when the proxy
// or the connection closed meanwhile.
func (p *Proxy) waitOpen(d int, pc *proxyConn) bool {
	for {
		p.mu.Lock()
		hole, closed, changed := p.blackhole[d], p.closed, p.changed
		_, open := p.conns[pc]
		p.mu.Unlock()
		if closed || !open {
			return false
		}
		if !hole {
			return true
		}
		<-changed
	}
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func each(dir Direction, f func(i int)) {
	if dir&Up != 0 {
		f(0)
	}
	if dir&Down != 0 {
		f(1)
	}
}

// SetLatency delays the bytes of dir by d from now on (0 removes it).
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.set(func() { each(dir, func(i int) { p.latency[i] = d }) })
}

// Blackhole stops forwarding dir: connections are still accepted, bytes
// are held back (the sender's writes block once the buffers fill), until
// Heal.
func (p *Proxy) Blackhole(dir Direction) {
	p.set(func() { each(dir, func(i int) { p.blackhole[i] = true }) })
}

// Drop closes every open connection now, and every one accepted until
// Heal.
func (p *Proxy) Drop() {
	var open []*proxyConn
	p.set(func() {
		p.dropping = true
		for pc := range p.conns {
			open = append(open, pc)
		}
	})
	for _, pc := range open {
		pc.close()
	}
}

// Heal removes every fault: latency, blackholes, dropping. Held-back
// bytes are delivered.
func (p *Proxy) Heal() {
	p.set(func() {
		p.latency, p.blackhole, p.dropping = [2]time.Duration{}, [2]bool{}, false
	})
}

// Conns is the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy and closes its connections; safe to call twice.
func (p *Proxy) Close() {
	var open []*proxyConn
	already := false
	p.set(func() {
		already = p.closed
		p.closed = true
		for pc := range p.conns {
			open = append(open, pc)
		}
	})
	if already {
		return
	}
	_ = p.l.Close()
	for _, pc := range open {
		pc.close()
	}
	p.wg.Wait()
}
