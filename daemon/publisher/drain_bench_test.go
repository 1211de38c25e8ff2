package publisher

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
)

// BenchmarkPublisherDrain measures the publisher alone draining a backlog
// of 4,000 outbox rows (four runs of a 1,000-task workflow) into a fresh
// quorum queue, one cycle (lock, publish, confirms, stamp, commit) after
// the other: rows/s is reported, never asserted. It is the publisher's own
// ceiling, to hold against W1's tasks/s and outbox_span_s (scripts/bench):
// while W1 drains far below it, pipelining the publisher does not pay.
//
//	go test -run '^$' -bench PublisherDrain -benchtime 5x -count 3 ./daemon/publisher/
func BenchmarkPublisherDrain(b *testing.B) {
	st, db, amqpURL, queue := publisherFixture(b)
	ctx := b.Context()
	var src strings.Builder
	src.WriteString("name: wide\ntasks:\n")
	for i := range core.MaxTasks {
		fmt.Fprintf(&src, "  - {name: t%d, handler: noop}\n", i)
	}
	def, err := core.ParseDefinition([]byte(src.String()))
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := st.ApplyWorkflow(ctx, def); err != nil {
		b.Fatal(err)
	}
	p, err := New(Config{Store: st, Broker: broker.Config{URLs: []string{amqpURL}, Queue: queue}})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(ctx); err != nil || p.lanes[0].pub == nil {
		b.Fatalf("start: %v", err)
	}
	b.Cleanup(p.closeLanes)
	var rows int
	var spent time.Duration
	for b.Loop() {
		b.StopTimer()
		for range 4 {
			if _, err := st.Trigger(ctx, store.TriggerRequest{Workflow: "wide", Actor: "bench"}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		for {
			n, err := p.cycle(ctx, p.lanes[0], p.lanes[0].pub)
			if err != nil {
				b.Fatal(err)
			}
			rows += n
			if n == 0 {
				break
			}
		}
		spent += time.Since(t0)
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&left); err != nil || left != 0 {
		b.Fatalf("%d rows left pending (%v)", left, err)
	}
	b.ReportMetric(float64(rows)/spent.Seconds(), "rows/s")
}
