package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/client"
	"github.com/flowforge/flowforge/e2e/harness"
)

const chainYAML = `
name: chain
tasks:
  - {name: a, handler: noop}
  - {name: b, handler: noop, depends_on: [a]}
`

// heldOpen is how long TestATransactionHeldOpenDoesNotStallOtherRuns keeps
// its transaction open after the trigger in it.
const heldOpen = 10 * time.Second

// TestATransactionHeldOpenDoesNotStallOtherRuns: a run triggered inside a
// transaction that then stays open for 10 s, while a scheduler, a
// publisher and a worker run, holds nothing they need: the runs triggered
// meanwhile (on the pool, and each in a transaction of its own that
// commits) each SUCCEEDED within 5 s, one after another for the whole 10 s,
// while the held run is still invisible; once that transaction commits,
// its run SUCCEEDED too.
func TestATransactionHeldOpenDoesNotStallOtherRuns(t *testing.T) {
	s := harness.NewStack(t, harness.StackOptions{})
	s.Daemon(t, "all", "all")
	s.Apply(t, chainYAML)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c := client.New(pool, client.Options{Actor: "e2e"})
	defer c.Close()

	held, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(context.Background())
	heldRun, err := c.TriggerTx(ctx, held, "chain", map[string]int{"n": -1}, client.TriggerOptions{IdempotencyKey: "held"})
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	done := 0
	for time.Since(opened) < heldOpen {
		id := triggerOther(t, c, pool, done)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.Wait(wctx, id, client.WaitOptions{})
		cancel()
		if err != nil || r.State != core.RunSucceeded {
			t.Fatalf("run %d (%s), triggered %v after the held transaction opened: %s, %v; want SUCCEEDED within 5s",
				done, id, time.Since(opened).Round(time.Millisecond), r.State, err)
		}
		done++
	}
	if _, err := c.Run(ctx, heldRun.RunID.String()); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the held run before its commit: %v, want ErrNotFound (invisible)", err)
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs SUCCEEDED while the transaction was held open for %v", done, time.Since(opened).Round(time.Millisecond))
	if done < 10 {
		t.Fatalf("only %d runs SUCCEEDED in %v beside the held transaction, want at least 10", done, heldOpen)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := c.Wait(wctx, heldRun.RunID.String(), client.WaitOptions{}); err != nil || r.State != core.RunSucceeded {
		t.Fatalf("the held run after its commit: %s, %v; want SUCCEEDED", r.State, err)
	}
}

// triggerOther triggers run i of chain beside the held transaction: even
// ones on the pool, odd ones in a transaction of their own, committed.
func triggerOther(t *testing.T, c *client.Client, pool *pgxpool.Pool, i int) string {
	t.Helper()
	ctx := t.Context()
	if i%2 == 0 {
		res, err := c.Trigger(ctx, "chain", map[string]int{"n": i}, client.TriggerOptions{})
		if err != nil {
			t.Fatalf("trigger %d: %v", i, err)
		}
		return res.RunID.String()
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	res, err := c.TriggerTx(ctx, tx, "chain", map[string]int{"n": i}, client.TriggerOptions{})
	if err != nil {
		t.Fatalf("trigger %d in a transaction: %v", i, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return res.RunID.String()
}
