package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const defaultTestURL = "amqp://guest:guest@127.0.0.1:5672/"

// testURL returns the broker URL for integration tests. It skips the test
// when the broker does not answer, unless CI is set, then it fails.
func testURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("FLOWFORGE_TEST_AMQP_URL")
	if u == "" {
		u = defaultTestURL
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("broker at FLOWFORGE_TEST_AMQP_URL not reachable (CI set): %v", err)
		}
		t.Skipf("broker not reachable, skipping integration test: %v", err)
	}
	_ = conn.Close()
	return u
}

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testHandlers returns the handler names this package's tests give
// consumers (Config.Handlers); testConfig's cleanup deletes their queues.
func testHandlers() []string { return []string{"alpha", "beta", "gamma"} }

// testConfig returns a Config for a unique queue whose queues are deleted
// when the test ends.
func testConfig(t *testing.T) Config {
	t.Helper()
	u := testURL(t)
	cfg := Config{
		URLs:           []string{u},
		Queue:          "fftest." + randHex(t),
		ConfirmTimeout: 10 * time.Second,
	}
	t.Cleanup(func() {
		// The queues, exchanges and the handler queues the tests use.
		c := cfg
		c.Handlers = testHandlers()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteTopology(ctx, c); err != nil {
			t.Errorf("delete topology: %v", err)
		}
	})
	return cfg
}

// adminDo runs fn on a fresh connection and channel to the broker at u.
func adminDo(t *testing.T, u string, fn func(ch *amqp.Channel) error) {
	t.Helper()
	if err := adminTry(u, fn); err != nil {
		t.Errorf("admin: %v", err)
	}
}

func adminTry(u string, fn func(ch *amqp.Channel) error) error {
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return fn(ch)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p, err := DialPublisher(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("DialPublisher: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("publisher Close: %v", err)
		}
	})
	return p
}

func mustConsumer(t *testing.T, cfg Config, prefetch int) *Consumer {
	t.Helper()
	c, err := DialConsumer(testCtx(t), cfg, prefetch, "")
	if err != nil {
		t.Fatalf("DialConsumer: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("consumer Close: %v", err)
		}
	})
	return c
}

// recv waits up to 10s for the next delivery.
func recv(t *testing.T, c *Consumer) Delivery {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if !ok {
			t.Fatalf("deliveries closed: %v", c.Err())
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	return Delivery{}
}

// waitClosed waits up to 10s for Deliveries to close, failing on any
// delivery.
func waitClosed(t *testing.T, c *Consumer) {
	t.Helper()
	select {
	case d, ok := <-c.Deliveries():
		if ok {
			t.Fatalf("unexpected delivery %q", d.MessageID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deliveries not closed within 10s")
	}
}

// eventually polls cond until it returns nil or 10s pass.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 10s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not a wait for state
	}
}

func depthIs(ctx context.Context, cfg Config, queue string, want int) func() error {
	return func() error {
		c := cfg
		c.Queue = queue
		n, _, err := QueueDepth(ctx, c)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%s holds %d messages, want %d", queue, n, want)
		}
		return nil
	}
}

// deadURL returns an amqp URL (with password "s3cr3t") of a local port
// nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "amqp://guest:s3cr3t@" + addr + "/"
}

// blackHole starts a listener that accepts connections and never answers;
// it returns an amqp URL for it.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "amqp://guest:guest@" + l.Addr().String() + "/"
}

// proxy is a TCP proxy to the broker that can freeze the broker->client
// direction or drop every connection.
type proxy struct {
	l       net.Listener
	target  string
	frozen  atomic.Bool
	release chan struct{}

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, brokerURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: u.Host, release: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	pu := *u
	pu.Host = l.Addr().String()
	return p, pu.String()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(up, c)
			_ = up.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.copyDown(c, up)
			_ = c.Close()
		}()
	}
}

// copyDown copies broker->client, stalling while frozen.
func (p *proxy) copyDown(dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.frozen.Load() {
				<-p.release
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// dropAll closes every proxied connection.
func (p *proxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *proxy) stop() {
	_ = p.l.Close()
	close(p.release)
	p.dropAll()
	p.wg.Wait()
}

// capture is a slog handler recording messages.
type capture struct {
	mu   sync.Mutex
	msgs []string
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, r.Message)
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func (c *capture) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if m == msg {
			n++
		}
	}
	return n
}
