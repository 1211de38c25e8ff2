package worker

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// testAMQPURL is the broker of these tests (FLOWFORGE_TEST_AMQP_URL); the
// test is skipped when it does not answer, unless CI is set.
func testAMQPURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("FLOWFORGE_TEST_AMQP_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("broker not reachable: %v", err)
		}
		t.Skipf("broker not reachable: %v", err)
	}
	_ = conn.Close()
	return u
}

// rig is a real worker on a throwaway database and a dispatch queue of its
// own on the test broker. Tests dispatch with publish (the outbox rows the
// store wrote, as the publisher daemon would send them) and wait on the
// worker's test signals.
type rig struct {
	t       *testing.T
	st      *store.Store
	db      *sql.DB
	broker  broker.Config
	metrics *metrics.Metrics
	w       *Worker
	signals testSignals
}

// newRig builds (but does not start) a worker with reg and the settings
// edit makes to its Config (may be nil); the queue and its dead-letter
// queue are deleted in t.Cleanup.
func newRig(t *testing.T, reg *core.Registry, edit func(*Config)) *rig {
	t.Helper()
	url := testAMQPURL(t)
	st, db, _ := storetest.NewWithDB(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	r := &rig{t: t, st: st, db: db, metrics: metrics.New(),
		broker: broker.Config{URLs: []string{url}, Queue: "fftest." + hex.EncodeToString(b)}}
	t.Cleanup(func() { deleteQueues(url, r.broker.Queue) })
	cfg := Config{Store: st, Broker: r.broker, Registry: reg, Concurrency: 2, Lease: 5 * time.Second,
		ID: "rig-worker", Metrics: r.metrics}
	if edit != nil {
		edit(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.signals = testSignals{finished: make(chan attemptFinished, 64), handedBack: make(chan uuid.UUID, 64)}
	w.signals = r.signals
	r.w = w
	return r
}

// deleteQueues removes queue and its dead-letter queue from the broker.
func deleteQueues(url, queue string) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_, _ = ch.QueueDelete(broker.DeadLetterQueue(queue), false, false, false)
	}
}

// start runs the worker (Start, then Run in a goroutine) until the test
// ends: t.Cleanup stops it and waits for Run to return.
func (r *rig) start() {
	r.t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	if err := r.w.Start(ctx); err != nil {
		stop()
		r.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.w.Run(ctx)
	}()
	r.t.Cleanup(func() {
		stop()
		<-done
	})
}

// publish sends every outbox row the store has not published yet to the
// rig's queue (with confirms), as the publisher daemon would, and stamps
// them published. It returns how many it sent.
func (r *rig) publish() int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rows, err := r.db.QueryContext(ctx, `SELECT id, payload::text FROM outbox WHERE published_at IS NULL ORDER BY id`)
	if err != nil {
		r.t.Fatal(err)
	}
	var msgs []broker.Message
	var ids []int64
	for rows.Next() {
		var id int64
		var body string
		if err := rows.Scan(&id, &body); err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, id)
		msgs = append(msgs, broker.Message{ID: strconv.FormatInt(id, 10), Body: []byte(body)})
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	rows.Close()
	if len(msgs) == 0 {
		return 0
	}
	p, err := broker.DialPublisher(ctx, r.broker)
	if err != nil {
		r.t.Fatal(err)
	}
	defer p.Close()
	out, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		r.t.Fatalf("publish: %v", err)
	}
	for i, o := range out {
		if o != broker.Confirmed {
			r.t.Fatalf("outbox row %d: %s", ids[i], o)
		}
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY ($1)`, ids); err != nil {
		r.t.Fatal(err)
	}
	return len(msgs)
}

// awaitFinished waits up to within for the worker's next recorded attempt.
func (r *rig) awaitFinished(within time.Duration) attemptFinished {
	r.t.Helper()
	select {
	case f := <-r.signals.finished:
		return f
	case <-time.After(within):
		r.t.Fatalf("no attempt finished within %v", within)
		return attemptFinished{}
	}
}

// awaitHandedBack waits up to within for the worker's next hand-back.
func (r *rig) awaitHandedBack(within time.Duration) uuid.UUID {
	r.t.Helper()
	select {
	case id := <-r.signals.handedBack:
		return id
	case <-time.After(within):
		r.t.Fatalf("no delivery handed back within %v", within)
		return uuid.UUID{}
	}
}

// taskOf returns the task called name of run.
func (r *rig) taskOf(run uuid.UUID, name string) store.TaskDetail {
	r.t.Helper()
	got, err := r.st.GetRun(context.Background(), run)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, tr := range got.Tasks {
		if tr.Name == name {
			d, err := r.st.GetTask(context.Background(), tr.ID)
			if err != nil {
				r.t.Fatal(err)
			}
			return d
		}
	}
	r.t.Fatalf("run %s has no task %q", run, name)
	return store.TaskDetail{}
}
