package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBuilds()
	os.Exit(code)
}

// assertGone checks, after a subtest (and therefore its cleanups) finished,
// that the given processes are dead and the directories removed, and that
// the shared services were not touched.
func assertGone(t *testing.T, what string, pids []int, dirs []string) {
	t.Helper()
	if len(pids) == 0 {
		t.Fatalf("%s: no pids were recorded", what)
	}
	for _, pid := range pids {
		if ProcessAlive(pid) {
			t.Errorf("%s: pid %d still alive after cleanup", what, pid)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: directory %s still exists after cleanup (%v)", what, d, err)
		}
	}
	for _, port := range []int{5432, 5672} {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			t.Logf("%s: shared service on %d not reachable (maybe not installed here): %v", what, port, err)
			continue
		}
		c.Close()
	}
}

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("lifecycle", func(t *testing.T) {
		start := time.Now()
		p := StartPostgres(t)
		t.Logf("TIMING postgres start: %v", time.Since(start))
		dirs = append(dirs, p.Dir)
		pids = append(pids, p.Pid())
		if p.Pid() == 0 || !ProcessAlive(p.Pid()) {
			t.Fatalf("postmaster pid %d not alive", p.Pid())
		}
		if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable", p.Port); p.URL("x") != want {
			t.Fatalf("URL = %q, want %q", p.URL("x"), want)
		}

		url := p.CreateDatabase(t, "fft_test")
		ctx := context.Background()
		db := openDB(t, url)
		if _, err := db.ExecContext(ctx, `CREATE TABLE kv (k text PRIMARY KEY, v text)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO kv VALUES ('a', 'before-kill')`); err != nil {
			t.Fatal(err)
		}
		// Open a second, idle connection so Kill has backends to kill.
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		backends := descendants(p.Pid())
		pids = append(pids, backends...)

		start = time.Now()
		p.Kill(t)
		t.Logf("TIMING postgres kill: %v", time.Since(start))
		if p.Pid() != 0 {
			t.Fatalf("Pid after Kill = %d", p.Pid())
		}
		for _, b := range backends {
			if ProcessAlive(b) {
				t.Errorf("backend %d survived Kill", b)
			}
		}
		if err := conn.PingContext(ctx); err == nil {
			t.Fatal("ping on a connection to a killed server succeeded")
		}
		conn.Close()
		db2 := openDB(t, url)
		err = db2.PingContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("ping after Kill: got %v, want connection refused", err)
		}

		start = time.Now()
		p.Start(t)
		t.Logf("TIMING postgres start after kill (crash recovery): %v", time.Since(start))
		pids = append(pids, p.Pid())
		db3 := openDB(t, url)
		var v string
		if err := db3.QueryRowContext(ctx, `SELECT v FROM kv WHERE k = 'a'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "before-kill" {
			t.Fatalf("v = %q", v)
		}
		db3.Close()

		start = time.Now()
		p.Restart(t)
		t.Logf("TIMING postgres restart: %v", time.Since(start))
		pids = append(pids, p.Pid())
		if got := p.Psql(t, "fft_test", "SELECT v FROM kv"); got != "before-kill" {
			t.Fatalf("after Restart: %q", got)
		}
		if got := p.Psql(t, "postgres", "SHOW max_connections"); got != "200" {
			t.Fatalf("max_connections = %q", got)
		}
		if got := p.Psql(t, "postgres", "SHOW port"); got != strconv.Itoa(p.Port) {
			t.Fatalf("port = %q", got)
		}

		p.Stop(t)
		if p.Pid() != 0 {
			t.Fatal("Pid after Stop != 0")
		}
		p.Start(t)
		pids = append(pids, p.Pid())
		// Leave it running: cleanup must stop it.
	})
	assertGone(t, "postgres", pids, dirs)
}

func dialRabbit(t *testing.T, url string) *amqp.Connection {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRabbit(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("lifecycle", func(t *testing.T) {
		start := time.Now()
		r := StartRabbit(t, RabbitOptions{ConsumerTimeout: 90 * time.Second})
		t.Logf("TIMING rabbit start: %v", time.Since(start))
		dirs = append(dirs, r.Dir)
		pids = append(pids, r.Pid(), r.proc.pid())
		if !ProcessAlive(r.Pid()) {
			t.Fatalf("beam pid %d not alive", r.Pid())
		}
		if got := r.Ctl(t, "eval", "application:get_env(rabbit, consumer_timeout)."); !strings.Contains(got, "90000") {
			t.Fatalf("consumer_timeout: %s", got)
		}

		conn := dialRabbit(t, r.URL())
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("q1", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "q1", true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("survives-kill")})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("confirm: ok=%v err=%v", ok, err)
		}

		// Without this, RabbitMQ 3.10 loses the registration of a quorum
		// queue declared < 3 min before a SIGKILL (see SyncDurableState).
		r.SyncDurableState(t)
		start = time.Now()
		r.Kill(t)
		t.Logf("TIMING rabbit kill: %v", time.Since(start))
		if _, err := amqp.Dial(r.URL()); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("dial after Kill: %v, want connection refused", err)
		}
		start = time.Now()
		r.Start(t)
		t.Logf("TIMING rabbit start after kill: %v", time.Since(start))
		pids = append(pids, r.Pid(), r.proc.pid())

		conn2 := dialRabbit(t, r.URL())
		ch2, err := conn2.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var msg amqp.Delivery
		Eventually(t, 20*time.Second, "message in q1 after restart", func() (bool, error) {
			m, ok, err := ch2.Get("q1", false)
			if err != nil {
				return false, err
			}
			msg = m
			return ok, nil
		})
		if string(msg.Body) != "survives-kill" {
			t.Fatalf("body = %q", msg.Body)
		}
		if err := msg.Ack(false); err != nil {
			t.Fatal(err)
		}

		// Memory alarm: a publishing connection gets connection.blocked.
		pub := dialRabbit(t, r.URL())
		blocked := pub.NotifyBlocked(make(chan amqp.Blocking, 4))
		pch, err := pub.Channel()
		if err != nil {
			t.Fatal(err)
		}
		publish := func() {
			_ = pch.PublishWithContext(context.Background(), "", "q1", false, false, amqp.Publishing{Body: []byte("x")})
		}
		publish()
		start = time.Now()
		r.SetMemoryAlarm(t, true)
		t.Logf("TIMING memory alarm on: %v", time.Since(start))
		publish()
		select {
		case b := <-blocked:
			if !b.Active {
				t.Fatalf("first Blocking notification: %+v, want Active", b)
			}
			t.Logf("blocked: %+v", b)
		case <-time.After(15 * time.Second):
			t.Fatal("no connection.blocked within 15s of the memory alarm")
		}
		start = time.Now()
		r.SetMemoryAlarm(t, false)
		t.Logf("TIMING memory alarm off: %v", time.Since(start))
		select {
		case b := <-blocked:
			if b.Active {
				t.Fatalf("Blocking notification after clearing: %+v, want !Active", b)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("no connection.unblocked within 15s of clearing the alarm")
		}

		start = time.Now()
		r.Stop(t)
		t.Logf("TIMING rabbit graceful stop: %v", time.Since(start))
		if r.Pid() != 0 {
			t.Fatal("Pid after Stop != 0")
		}
		// Leave it stopped: cleanup must cope with that too.
	})
	assertGone(t, "rabbit", pids, dirs)
}

func TestRabbitCluster(t *testing.T) {
	t.Parallel()
	var pids []int
	var dirs []string
	t.Run("three-nodes", func(t *testing.T) {
		start := time.Now()
		nodes := StartRabbitCluster(t, 3, RabbitOptions{})
		t.Logf("TIMING rabbit cluster(3) start: %v", time.Since(start))
		seen := map[string]bool{}
		for _, r := range nodes {
			dirs = append(dirs, r.Dir)
			pids = append(pids, r.Pid(), r.proc.pid())
			if seen[r.Node] || seen[strconv.Itoa(r.Port)] {
				t.Fatalf("duplicate node name or port: %s %d", r.Node, r.Port)
			}
			seen[r.Node], seen[strconv.Itoa(r.Port)] = true, true
		}
		if got := nodes[1].RunningNodes(t); len(got) != 3 {
			t.Fatalf("running nodes seen from node 2: %v", got)
		}

		// A quorum queue spread over the cluster.
		conn := dialRabbit(t, nodes[0].URL())
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("cq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}

		nodes[2].Kill(t)
		Eventually(t, 30*time.Second, "2 running nodes", func() (bool, error) {
			got, err := nodes[0].runningNodes()
			return err == nil && len(got) == 2, fmt.Errorf("running: %v (%v)", got, err)
		})
		for _, r := range nodes[:2] {
			c := dialRabbit(t, r.URL())
			ch, err := c.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "cq", true, false, amqp.Publishing{Body: []byte(r.Node)})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			ok, err := dc.WaitContext(ctx)
			cancel()
			if err != nil || !ok {
				t.Fatalf("publish to quorum queue via %s with one node down: ok=%v err=%v", r.Node, ok, err)
			}
		}
		if _, err := amqp.Dial(nodes[2].URL()); err == nil {
			t.Fatal("killed node still accepts connections")
		}
	})
	assertGone(t, "rabbit cluster", pids, dirs)
}

func TestProcess(t *testing.T) {
	t.Parallel()
	t.Run("sigterm", func(t *testing.T) {
		p := StartProcess(t, "sh", "/bin/sh", []string{"-c", "echo ready; sleep 30"}, nil)
		if p.Pid() <= 0 || p.Name != "sh" || p.Cmd == nil {
			t.Fatalf("bad process %+v", p)
		}
		p.WaitForLog(t, "ready", 5*time.Second)
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code != 128+int(syscall.SIGTERM) {
			t.Fatalf("exit code %d, want 143", code)
		}
		if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("Signal after exit: %v", err)
		}
	})
	t.Run("exit-code-env-and-wait-timeout", func(t *testing.T) {
		p := StartProcess(t, "sh2", "/bin/sh", []string{"-c", `echo "v=$FFT_X"; sleep 0.3; exit 7`}, []string{"FFT_X=42"})
		if _, err := p.Wait(10 * time.Millisecond); err == nil {
			t.Fatal("Wait with a short timeout should fail while running")
		}
		code, err := p.Wait(5 * time.Second)
		if err != nil || code != 7 {
			t.Fatalf("code=%d err=%v", code, err)
		}
		if !strings.Contains(p.Logs(), "v=42") {
			t.Fatalf("logs: %q", p.Logs())
		}
	})
	t.Run("kill", func(t *testing.T) {
		p := StartProcess(t, "sleeper", "/bin/sleep", []string{"30"}, nil)
		p.Kill()
		if code, err := p.Wait(time.Second); err != nil || code != 128+9 {
			t.Fatalf("code=%d err=%v", code, err)
		}
		if ProcessAlive(p.Pid()) {
			t.Fatal("alive after Kill")
		}
	})
	t.Run("go-binary", func(t *testing.T) {
		bin := BuildGo(t, "./testdata/fftecho", "fftecho")
		if again := BuildGo(t, "./testdata/fftecho", "fftecho"); again != bin {
			t.Fatalf("second BuildGo returned %s, want cached %s", again, bin)
		}
		p := StartProcess(t, "fftecho", bin, nil, []string{"FFTECHO_GREETING=hi"})
		p.WaitForLog(t, "ready hi", 5*time.Second)
		_ = p.Signal(syscall.SIGTERM)
		if code, err := p.Wait(5 * time.Second); err != nil || code != 0 {
			t.Fatalf("code=%d err=%v", code, err)
		}
		p.WaitForLog(t, "terminating", time.Second)
	})

	// Cleanup must kill the process and its grandchildren (and nothing else).
	var pids []int
	t.Run("cleanup", func(t *testing.T) {
		p := StartProcess(t, "tree", "/bin/sh", []string{"-c", "sleep 60 & echo child=$!; echo ready; wait"}, nil)
		p.WaitForLog(t, "ready", 5*time.Second)
		var grandchild int
		for _, line := range strings.Split(p.Logs(), "\n") {
			if v, ok := strings.CutPrefix(line, "child="); ok {
				grandchild, _ = strconv.Atoi(v)
			}
		}
		if !ProcessAlive(grandchild) {
			t.Fatalf("grandchild %d not alive", grandchild)
		}
		pids = []int{p.Pid(), grandchild}
	})
	assertGone(t, "process", pids, nil)
}

func TestFFCTLBinEnv(t *testing.T) {
	t.Setenv("FFCTL_BIN", "/bin/true")
	if got := BuildFFCTL(t); got != "/bin/true" {
		t.Fatalf("BuildFFCTL = %q", got)
	}
}

func TestEventuallyAndFreePort(t *testing.T) {
	t.Parallel()
	n := 0
	start := time.Now()
	Eventually(t, 5*time.Second, "third call", func() (bool, error) {
		n++
		return n >= 3, errors.New("not yet")
	})
	if n != 3 || time.Since(start) > time.Second {
		t.Fatalf("n=%d after %v", n, time.Since(start))
	}
	if err := poll(100*time.Millisecond, func() (bool, error) { return false, errors.New("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("poll error = %v", err)
	}
	p := FreePort(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatalf("FreePort %d not bindable: %v", p, err)
	}
	l.Close()
	if ProcessAlive(0) || ProcessAlive(-1) || !ProcessAlive(os.Getpid()) {
		t.Fatal("ProcessAlive basics")
	}
}
