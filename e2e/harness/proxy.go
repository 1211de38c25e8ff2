package harness

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ProxyMode is what a Proxy does with the bytes it carries.
type ProxyMode int

// Proxy modes.
const (
	// ProxyPass forwards both directions.
	ProxyPass ProxyMode = iota
	// ProxyReset resets (TCP RST) every open connection when it is set and
	// every new one as soon as it is accepted: the target looks down. The
	// client's connect has succeeded by then, so whether its first write
	// or its first read meets the reset is a race (see ProxyRefuse).
	ProxyReset
	// ProxyBlackhole keeps connections open and accepts new ones, but
	// forwards nothing in either direction: the bytes read are held (like
	// TCP segments retransmitted across a partition) and delivered, in
	// order, once the mode is ProxyPass again. New connections are not
	// dialled to the target until then.
	ProxyBlackhole
	// ProxyDropReplies forwards client→server bytes but discards every
	// server→client byte: a statement reaches the server and commits, and
	// its reply never reaches the client. A connection that lost bytes is
	// out of step for good: it is reset when the mode changes again.
	ProxyDropReplies
	// ProxyRefuse stops listening and resets every open connection: a new
	// connection is refused by the kernel (the client's connect fails with
	// ECONNREFUSED before a byte is exchanged), as for a server that is
	// down. ProxyReset accepts and then resets, so a client may or may not
	// have written its first bytes when the reset lands; here the client's
	// error is the same every time. The port stays the proxy's (see
	// StartProxy), and the next mode listens on it again.
	ProxyRefuse
)

func (m ProxyMode) String() string {
	switch m {
	case ProxyPass:
		return "pass"
	case ProxyReset:
		return "reset"
	case ProxyBlackhole:
		return "blackhole"
	case ProxyDropReplies:
		return "drop-replies"
	case ProxyRefuse:
		return "refuse"
	}
	return fmt.Sprintf("ProxyMode(%d)", int(m))
}

// proxyDialTimeout bounds the dial to the target.
const proxyDialTimeout = 5 * time.Second

// Proxy is a fault-injecting TCP proxy on 127.0.0.1 in front of one target
// address (typically a PostgreSQL server): point a daemon's database URL at
// it (URL) and switch its Mode to cut, black-hole, lose replies or refuse
// connections. Safe for concurrent use. It is closed in t.Cleanup (every
// connection it carries is closed and its goroutines are waited for).
type Proxy struct {
	// Addr is the proxy's listening address, 127.0.0.1:port.
	Addr   string
	target string
	port   *os.File // bound to Addr, never listening: keeps the port the proxy's while ln is closed
	t      testing.TB
	wg     sync.WaitGroup

	mu      sync.Mutex
	ln      net.Listener // nil in ProxyRefuse
	mode    ProxyMode
	changed chan struct{} // closed (and replaced) on every mode change or Close
	conns   map[*proxyConn]struct{}
	closed  bool

	dropAfter string // DropCommitReply's pattern
	fired     bool   // DropCommitReply lost its reply

	dropped  atomic.Int64 // server→client bytes discarded
	accepted atomic.Int64 // connections accepted
}

type proxyConn struct {
	client  net.Conn
	once    sync.Once
	mu      sync.Mutex
	server  net.Conn    // nil until dialled
	ended   bool        // close ran
	dropped atomic.Bool // lost server→client bytes: out of step
	lost    atomic.Bool // DropCommitReply fired here: every reply is lost
	pg      pgStream    // client→server protocol, for DropCommitReply
}

// StartProxy listens on a free 127.0.0.1 port and forwards each accepted
// connection to target (host:port), starting in ProxyPass. The port is
// first bound by a socket that never listens, kept until Close: Linux
// gives a port so bound to no other socket (no listener on port 0, no
// client's local port), so while ProxyRefuse has closed the listener
// nothing else takes the port, and the next listener binds it again beside
// the placeholder (both set SO_REUSEADDR, as every Go listener does). The
// test fails (t.Fatalf) if it cannot listen.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1", target)
}

// StartProxyOn is StartProxy listening on a free port of host, an IPv4
// address of this machine (a Netns's HostAddr: a daemon in the namespace
// reaches a server on 127.0.0.1 through it).
func StartProxyOn(t testing.TB, host, target string) *Proxy {
	t.Helper()
	port, addr, err := reservePort(host)
	if err != nil {
		t.Fatalf("harness: StartProxy: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = port.Close()
		t.Fatalf("harness: StartProxy: %v", err)
	}
	p := &Proxy{Addr: addr, target: target, port: port, t: t, changed: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.serveListener(ln)
	t.Cleanup(p.Close)
	return p
}

// reservePort binds a TCP socket with SO_REUSEADDR to a free port of
// host (an IPv4 address), without listening, and returns it and its
// address.
func reservePort(host string) (*os.File, string, error) {
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is4() {
		return nil, "", fmt.Errorf("reserve a port: %q is no IPv4 address", host)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("reserve a port: %w", err)
	}
	f := os.NewFile(uintptr(fd), "proxy-port")
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = f.Close()
		return nil, "", fmt.Errorf("reserve a port: SO_REUSEADDR: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ip.As4()}); err != nil {
		_ = f.Close()
		return nil, "", fmt.Errorf("reserve a port: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = f.Close()
		return nil, "", fmt.Errorf("reserve a port: %w", err)
	}
	return f, net.JoinHostPort(host, strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)), nil
}

// serveListener makes ln the proxy's listener and accepts its connections
// in a goroutine of the proxy's until ln is closed. The caller holds p.mu,
// or is StartProxy.
func (p *Proxy) serveListener(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
}

// URL returns rawURL (a postgres:// or amqp:// URL) with its host and port
// replaced by the proxy's. It panics on a URL that does not parse (a test
// bug).
func (p *Proxy) URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("harness: Proxy.URL(%q): %v", rawURL, err))
	}
	u.Host = p.Addr
	return u.String()
}

// Mode returns the current mode.
func (p *Proxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy to m. ProxyReset and ProxyRefuse reset every
// open connection at once; ProxyRefuse closes the listener, and the next
// mode listens again (the test fails if it cannot); leaving
// ProxyDropReplies resets the connections that lost bytes.
func (p *Proxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	old := p.mode
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	if m == ProxyRefuse && p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	if m != ProxyRefuse && p.ln == nil && !p.closed {
		if ln, err := net.Listen("tcp", p.Addr); err != nil {
			p.t.Errorf("harness: proxy %s: listen again after %s: %v", p.Addr, old, err)
		} else {
			p.serveListener(ln)
		}
	}
	var reset []*proxyConn
	for c := range p.conns {
		if m.cuts() || c.lost.Load() || (old == ProxyDropReplies && m != ProxyDropReplies && c.dropped.Load()) {
			reset = append(reset, c)
		}
	}
	p.mu.Unlock()
	for _, c := range reset {
		c.reset()
	}
}

// ResetConns resets every open connection (TCP RST to both ends) without
// changing the mode; new connections are served by the current mode.
func (p *Proxy) ResetConns() {
	p.mu.Lock()
	all := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
}

// Conns returns how many connections are open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns how many connections the proxy has accepted in all.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// DroppedBytes returns how many server→client bytes ProxyDropReplies
// discarded in all.
func (p *Proxy) DroppedBytes() int64 { return p.dropped.Load() }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	all := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		all = append(all, c)
	}
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	for _, c := range all {
		c.reset()
	}
	p.wg.Wait()
	_ = p.port.Close()
}

// cuts reports whether m ends every connection (ProxyReset, ProxyRefuse).
func (m ProxyMode) cuts() bool { return m == ProxyReset || m == ProxyRefuse }

// state returns the mode, a channel closed at the next change, and whether
// the proxy is closed.
func (p *Proxy) state() (ProxyMode, <-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.changed, p.closed
}

// accept serves ln's connections until ln is closed (Close, ProxyRefuse).
func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		c := &proxyConn{client: conn}
		p.mu.Lock()
		if p.closed || p.mode.cuts() {
			p.mu.Unlock()
			c.reset()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the target (once the mode lets bytes through) and pipes both
// directions until either side ends.
func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	for {
		mode, changed, closed := p.state()
		if closed || mode.cuts() {
			return
		}
		if mode != ProxyBlackhole {
			break
		}
		<-changed
	}
	server, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
	if err != nil {
		c.reset()
		return
	}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		_ = server.Close()
		return
	}
	c.server = server
	c.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, c.client, server, false); done <- struct{}{} }()
	go func() { p.pipe(c, server, c.client, true); done <- struct{}{} }()
	<-done
	c.close()
	<-done
}

// pipe copies src to dst under the proxy's mode; reply marks the
// server→client direction.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !reply && c.pg.feed(buf[:n], p.armed()) && p.fire() {
			c.lost.Store(true) // from this chunk on, its replies are lost
			c.dropped.Store(true)
		}
		if n > 0 && !p.deliver(c, dst, buf[:n], reply) {
			return
		}
		if err != nil {
			return
		}
	}
}

// deliver writes b to dst when the mode allows it: at once in ProxyPass,
// after the mode changes in ProxyBlackhole, never (discarded) for replies
// in ProxyDropReplies. It reports false when the connection must end.
func (p *Proxy) deliver(c *proxyConn, dst net.Conn, b []byte, reply bool) bool {
	for {
		mode, changed, closed := p.state()
		switch {
		case closed || mode.cuts():
			return false
		case mode == ProxyBlackhole:
			<-changed
			continue
		case reply && (mode == ProxyDropReplies || c.lost.Load()):
			c.dropped.Store(true)
			p.dropped.Add(int64(len(b)))
			return true
		case c.dropped.Load() && !c.lost.Load():
			return false // out of step since it lost bytes
		}
		_, err := dst.Write(b)
		return err == nil
	}
}

// reset ends the connection with a TCP RST on both sides.
func (c *proxyConn) reset() {
	for _, conn := range []net.Conn{c.client, c.serverConn()} {
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	c.close()
}

func (c *proxyConn) serverConn() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		c.mu.Lock()
		c.ended = true
		s := c.server
		c.mu.Unlock()
		if s != nil {
			_ = s.Close()
		}
	})
}
