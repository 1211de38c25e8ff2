package worker

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/broker/brokertest"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
	"github.com/flowforge/flowforge/daemon/metrics"
)

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
// edit makes to its Config (may be nil), on a queue of its own.
func newRig(t *testing.T, reg *core.Registry, edit func(*Config)) *rig {
	t.Helper()
	url := brokertest.URL(t)
	st, db, _ := storetest.NewWithDB(t)
	r := &rig{t: t, st: st, db: db, metrics: metrics.New(),
		broker: broker.Config{URLs: []string{url}, Queue: brokertest.Queue(t, url)}}
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
	return storetest.Task(r.t, r.st, run, name)
}
