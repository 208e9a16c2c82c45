package testenv

import (
	"net"
	"sync"
)

// Gate makes a server's own listener fail its clients on demand, for an
// outage of a server that tells clients where to connect: a Kafka broker
// advertises its listener's address in metadata, so a Proxy in front of
// it is bypassed once the client learns the broker's address. Pass
// Gate.Listen to the server (kfake.ListenFn); Cut then closes every
// connection and closes each new one as soon as it is accepted (a client
// sees its connection attempts fail, as with a broker that is down),
// until Restore. It is safe for concurrent use.
type Gate struct {
	mu    sync.Mutex
	cut   bool
	conns map[*gatedConn]struct{}
}

// NewGate returns an open Gate.
func NewGate() *Gate { return &Gate{conns: map[*gatedConn]struct{}{}} }

// Listen is net.Listen with the listener behind the gate.
func (g *Gate) Listen(network, address string) (net.Listener, error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &gatedListener{Listener: l, g: g}, nil
}

// Cut closes every open connection, and every one accepted until Restore.
func (g *Gate) Cut() {
	g.mu.Lock()
	g.cut = true
	open := make([]*gatedConn, 0, len(g.conns))
	for c := range g.conns {
		open = append(open, c)
	}
	g.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// Restore lets connections through again.
func (g *Gate) Restore() {
	g.mu.Lock()
	g.cut = false
	g.mu.Unlock()
}

type gatedListener struct {
	net.Listener
	g *Gate
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.g.mu.Lock()
		if l.g.cut {
			l.g.mu.Unlock()
			_ = c.Close()
			continue
		}
		gc := &gatedConn{Conn: c, g: l.g}
		l.g.conns[gc] = struct{}{}
		l.g.mu.Unlock()
		return gc, nil
	}
}

type gatedConn struct {
	net.Conn
	g    *Gate
	once sync.Once
	err  error
}

func (c *gatedConn) Close() error {
	c.once.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
		c.err = c.Conn.Close()
	})
	return c.err
}
