package testenv

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy for one test, to put between a client and a server
// (of the harness or not) and inject network faults: latency, cut and
// reset connections, lost replies. Its methods are safe for concurrent use.
//
// It is our own, not a library: the maintained choice,
// github.com/Shopify/toxiproxy/v2, is offered by the module mirror only in
// old versions (v2.3.0, v2.5.0), runs as a server driven over HTTP, would
// add many dependencies to go.mod, and has no fault for "the server applied
// the request but its reply was lost", which DropReplies provides.
type Proxy struct {
	t      testing.TB
	target string
	addr   string // fixed for the proxy's life, across Cut and Restore

	latency atomic.Int64  // time.Duration added to data in both directions
	drop    atomic.Int64  // server replies left to swallow
	share   atomic.Uint64 // math.Float64bits of the share of replies DropShare swallows
	dropped atomic.Int64  // replies swallowed so far

	mu     sync.Mutex
	ln     net.Listener // nil while cut or closed
	links  map[*link]struct{}
	epoch  int // advanced by Cut and Reset: older links are dropped
	closed bool
	// Links are numbered as they are accepted; DropReplies applies to
	// those numbered below dropBefore.
	nextLink, dropBefore uint64
	wg                   sync.WaitGroup // accept loops and pumps
}

// NewProxy starts a proxy to target (host:port) listening on a free
// 127.0.0.1 port, closed when t ends. Register it after the server it
// fronts, so that it closes first.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy to %s: listen: %v", target, err)
	}
	p := &Proxy{t: t, target: target, addr: ln.Addr().String(), ln: ln, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept(ln)
	t.Cleanup(p.close)
	return p
}

// SetLatency delays the data forwarded in each direction by d from now on
// (0 removes the delay). Data keeps its order, and a stream keeps its
// throughput: each chunk is held d after it arrived, not after the one
// before it was sent.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Cut closes every connection abruptly and stops listening, so that new
// connections are refused, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	links := p.takeLinks()
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, l := range links {
		l.close(true)
	}
}

// Restore listens again, on the same address, after Cut. It fails the test
// (t.Errorf) if the address cannot be had back within five seconds.
// Restoring a proxy that is not cut does nothing.
func (p *Proxy) Restore() {
	p.mu.Lock()
	busy := p.ln != nil || p.closed
	p.mu.Unlock()
	if busy {
		return
	}
	var ln net.Listener
	err := pollUntil(5*time.Second, func(context.Context) error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err
	})
	if err != nil {
		p.t.Errorf("testenv: proxy to %s: listen again on %s: %v", p.target, p.addr, err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil || p.closed {
		_ = ln.Close()
		return
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
}

// Reset closes every current connection abruptly (TCP RST to both sides)
// and keeps accepting new ones.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.close(true)
	}
}

// DropReplies swallows the next n replies of the server on the
// connections open now: the requests reach the server, which applies them,
// but the next data the server sends back on one of those connections is
// discarded and that connection closed, as when a reply is lost in the
// network. Connections opened later are spared, so that a client's new
// connection does not lose its handshake instead: call DropReplies once
// the client's connection is established and idle (a PING first), and
// make sure the request goes over it. Note that go-redis resends a command
// whose connection fails (MaxRetries), which applies it again.
func (p *Proxy) DropReplies(n int) {
	p.mu.Lock()
	p.dropBefore = p.nextLink
	p.mu.Unlock()
	p.drop.Add(int64(max(n, 0)))
}

// DropShare swallows each reply of the server with probability share (0
// stops it), on every connection, as DropReplies does one: the request was
// applied, the reply is discarded and the connection closed. The first
// data a server sends on a connection (its handshake) is spared: replies
// are lost, connections are not refused.
func (p *Proxy) DropShare(share float64) { p.share.Store(math.Float64bits(share)) }

// Dropped returns how many replies DropReplies and DropShare swallowed.
func (p *Proxy) Dropped() int { return int(p.dropped.Load()) }

// takeDrop consumes one reply to drop, if any is left and l was open at
// the last DropReplies, or draws one with the share of DropShare.
func (p *Proxy) takeDrop(l *link) bool {
	if share := math.Float64frombits(p.share.Load()); share > 0 && l.replied.Swap(true) && rand.Float64() < share {
		p.dropped.Add(1)
		return true
	}
	p.mu.Lock()
	eligible := l.id < p.dropBefore
	p.mu.Unlock()
	if !eligible {
		return false
	}
	for {
		n := p.drop.Load()
		if n <= 0 {
			return false
		}
		if p.drop.CompareAndSwap(n, n-1) {
			p.dropped.Add(1)
			return true
		}
	}
}

// takeLinks removes and returns every link; p.mu must be held.
func (p *Proxy) takeLinks() []*link {
	p.epoch++
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	clear(p.links)
	return links
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	links := p.takeLinks()
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, l := range links {
		l.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed by Cut or close
		}
		p.mu.Lock()
		epoch, id := p.epoch, p.nextLink
		p.nextLink++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.connect(c, epoch, id)
	}
}

// connect dials the target for client c, accepted in epoch as link id,
// and starts forwarding.
func (p *Proxy) connect(c net.Conn, epoch int, id uint64) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		abort(c)
		return
	}
	l := &link{id: id, client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.epoch != epoch {
		p.mu.Unlock()
		l.close(true)
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(4)
	p.mu.Unlock()
	go p.pump(l, c, s, false)
	go p.pump(l, s, c, true)
}

// chunk is data read from one side, to be written to the other at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump forwards src to dst through a queue that holds each chunk for the
// latency; fromServer marks the direction whose data DropReplies
// swallows. It runs two goroutines, each counted in p.wg.
func (p *Proxy) pump(l *link, src, dst net.Conn, fromServer bool) {
	q := make(chan chunk, 64)
	go func() {
		defer p.wg.Done()
		defer p.forget(l)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-l.done:
					return
				}
			}
			if _, err := dst.Write(c.b); err != nil {
				l.close(false)
				return
			}
		}
		// src ended and everything it sent was written: end the link.
		l.close(false)
	}()
	defer p.wg.Done()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromServer && p.takeDrop(l) {
				l.close(false)
				return
			}
			c := chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.latency.Load()))}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// forget removes l from the live links.
func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// link is one proxied connection: a client and the server connection
// dialed for it.
type link struct {
	id             uint64
	replied        atomic.Bool // the server sent data on it (DropShare spares the first)
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed by close
}

// close closes both connections, abruptly (RST) or not.
func (l *link) close(abrupt bool) {
	l.once.Do(func() {
		close(l.done)
		if abrupt {
			abort(l.client)
			abort(l.server)
			return
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// abort closes c with a TCP RST rather than a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
