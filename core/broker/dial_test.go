package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestDialFailover(t *testing.T) {
	good := testURL(t)
	dead1, dead2 := deadURL(t), deadURL(t)

	t.Run("dead then good", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.URLs = []string{dead1, good}
		mustPublisher(t, cfg)
		if err := Ping(testCtx(t), cfg); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})

	t.Run("all dead", func(t *testing.T) {
		cfg := Config{URLs: []string{dead1, dead2, "amqp://guest:s3cr3t@[::1"}}
		err := Ping(testCtx(t), cfg)
		if err == nil {
			t.Fatal("Ping succeeded against dead URLs")
		}
		msg := err.Error()
		for _, u := range []string{dead1, dead2} {
			hostport := strings.TrimSuffix(strings.TrimPrefix(u, "amqp://guest:s3cr3t@"), "/")
			if !strings.Contains(msg, hostport) {
				t.Errorf("error does not name %s: %s", hostport, msg)
			}
		}
		if !strings.Contains(msg, "broker url #3") {
			t.Errorf("error does not name the unparseable url: %s", msg)
		}
		if strings.Contains(msg, "s3cr3t") {
			t.Errorf("error leaks the password: %s", msg)
		}
		var de *dialError
		if !errors.As(err, &de) || len(de.errs) != 3 {
			t.Errorf("error does not wrap all 3 failures: %#v", err)
		}
		_, err = DialPublisher(testCtx(t), cfg)
		if err == nil || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("DialPublisher: %v", err)
		}
	})

	t.Run("cursor starts after the last url that worked", func(t *testing.T) {
		logs := &capture{}
		cfg := testConfig(t)
		cfg.URLs = []string{good, dead1}
		cfg.Cursor = &Cursor{}
		cfg.Logger = slog.New(logs)
		if err := Ping(testCtx(t), cfg); err != nil {
			t.Fatal(err)
		}
		if n := logs.count("broker: dial failed"); n != 0 {
			t.Fatalf("first dial tried the dead url (%d failures)", n)
		}
		// Next dial starts at the dead URL, then wraps around to the good one.
		if err := Ping(testCtx(t), cfg); err != nil {
			t.Fatal(err)
		}
		if n := logs.count("broker: dial failed"); n != 1 {
			t.Fatalf("second dial: %d failures, want 1", n)
		}
	})
}

func TestCursorOrder(t *testing.T) {
	var nilCursor *Cursor
	if got := nilCursor.start(3); got != 0 {
		t.Errorf("nil cursor start = %d", got)
	}
	c := &Cursor{}
	tests := []struct{ record, n, want int }{
		{-1, 3, 0}, {0, 3, 1}, {1, 3, 2}, {2, 3, 0}, {0, 1, 0},
	}
	for _, tt := range tests {
		if tt.record >= 0 {
			c.record(tt.record)
		}
		if got := c.start(tt.n); got != tt.want {
			t.Errorf("after record(%d): start(%d) = %d, want %d", tt.record, tt.n, got, tt.want)
		}
	}
}

// TestDialHonoursContext dials a listener that accepts but never speaks
// AMQP: the handshake would hang until DialTimeout (set to 1 minute), so
// only ctx can end it.
func TestDialHonoursContext(t *testing.T) {
	hole := blackHole(t)
	cfg := Config{URLs: []string{hole}, DialTimeout: time.Minute, Queue: "fftest.blackhole"}
	dials := map[string]func(context.Context) error{
		"publisher": func(ctx context.Context) error { _, err := DialPublisher(ctx, cfg); return err },
		"consumer":  func(ctx context.Context) error { _, err := DialConsumer(ctx, cfg, 1, ""); return err },
		"ping":      func(ctx context.Context) error { return Ping(ctx, cfg) },
		"depth":     func(ctx context.Context) error { _, _, err := QueueDepth(ctx, cfg); return err },
	}
	for name, dialFn := range dials {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() { errc <- dialFn(ctx) }()
			time.AfterFunc(200*time.Millisecond, cancel)
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("dial did not return within 3s of ctx cancel")
			}
		})
	}
}

func TestDialTimeout(t *testing.T) {
	cfg := Config{URLs: []string{blackHole(t)}, DialTimeout: 300 * time.Millisecond}
	start := time.Now()
	err := Ping(t.Context(), cfg)
	if err == nil {
		t.Fatal("Ping to a black hole succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Ping took %v with DialTimeout 300ms", d)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{URLs: []string{"amqp://x/"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queue != QueueDefault || cfg.ConfirmTimeout != 10*time.Second ||
		cfg.DialTimeout != 5*time.Second || cfg.Heartbeat != 10*time.Second || cfg.Logger == nil {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	for name, bad := range map[string]Config{
		"no urls":        {},
		"reserved name":  {URLs: []string{"amqp://x/"}, Queue: "amq.foo"},
		"too long":       {URLs: []string{"amqp://x/"}, Queue: strings.Repeat("q", 252)},
		"negative":       {URLs: []string{"amqp://x/"}, ConfirmTimeout: -1},
		"heartbeat 1ms":  {URLs: []string{"amqp://x/"}, Heartbeat: time.Millisecond},
		"heartbeat 1.5s": {URLs: []string{"amqp://x/"}, Heartbeat: 1500 * time.Millisecond},
		"heartbeat 19h":  {URLs: []string{"amqp://x/"}, Heartbeat: 19 * time.Hour},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestDialAsksTheBrokerForTheConfiguredHeartbeat: the connection's
// heartbeat is Config.Heartbeat (the broker's own, 60 s by default, is
// larger), or HeartbeatDefault when unset: the interval that bounds how
// soon a black-holed connection is noticed (mode 137).
func TestDialAsksTheBrokerForTheConfiguredHeartbeat(t *testing.T) {
	for _, want := range []time.Duration{3 * time.Second, 0} {
		cfg, err := Config{URLs: []string{testURL(t)}, Heartbeat: want}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		conn, err := dial(testCtx(t), cfg, "heartbeat-test")
		if err != nil {
			t.Fatal(err)
		}
		got := conn.Config.Heartbeat
		_ = conn.Close()
		if want == 0 {
			want = HeartbeatDefault
		}
		if got != want {
			t.Errorf("Config.Heartbeat %v: the connection's heartbeat is %v", want, got)
		}
	}
}

func TestPingAndQueueDepth(t *testing.T) {
	cfg := testConfig(t)
	ctx := testCtx(t)
	// Ping works before the queue exists.
	if err := Ping(ctx, cfg); err != nil {
		t.Fatalf("Ping before declare: %v", err)
	}
	if _, _, err := QueueDepth(ctx, cfg); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("QueueDepth before declare: %v, want ErrQueueNotFound", err)
	}
	p := mustPublisher(t, cfg)
	mustConsumer(t, cfg, 1)
	publishOne(t, p, "d1")
	publishOne(t, p, "d2")
	// prefetch 1: one message delivered (unacked), one ready.
	eventually(t, "one ready message and one consumer", func() error {
		n, consumers, err := QueueDepth(ctx, cfg)
		if err != nil {
			return err
		}
		if n != 1 || consumers != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	if err := Ping(ctx, cfg); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}
