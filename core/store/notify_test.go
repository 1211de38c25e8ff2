package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/core/store/storetest"
)

// notifyFixture is a fixture that also knows its database's URL, to LISTEN.
func notifyFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	s, db, url := storetest.NewWithDB(t)
	return &fixture{t: t, ctx: t.Context(), s: s, db: db}, url
}

// listenOn LISTENs on channel of the database at url (closed at cleanup).
func listenOn(t *testing.T, url, channel string) *store.Listener {
	t.Helper()
	l, err := store.ListenOn(t.Context(), url, channel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// next returns the payload items of the listener's next notification.
func next(t *testing.T, l *store.Listener) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	items, err := l.Wait(ctx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return items
}

// TestCancelRunAndAFailingFailFastRunNotifyTheCancelChannel: mode 47.
// CancelRun tells the workers on store.CancelChannel which run to stop (and
// still wakes the schedulers on TasksChannel); a scheduler pass that fails
// a fail_fast run while a task of it runs names that run there too, once;
// a run without fail_fast that fails does not (its siblings run on), which
// the next notification, another run's cancel, proves: notifications reach
// a listener in commit order.
func TestCancelRunAndAFailingFailFastRunNotifyTheCancelChannel(t *testing.T) {
	f, url := notifyFixture(t)
	f.apply(`
name: pair
tasks:
  - {name: long, handler: sleep}
  - {name: doomed, handler: fail}
`)
	f.apply(`
name: pair-ff
fail_fast: true
tasks:
  - {name: long, handler: sleep}
  - {name: doomed, handler: fail}
`)
	cancels := listenOn(t, url, store.CancelChannel)

	// start triggers a run of workflow, runs both tasks, and kills doomed.
	start := func(workflow string) uuid.UUID {
		run := f.trigger(workflow, "")
		f.advance()
		ts := f.tasks(run)
		f.claim(ts["long"].ID, "w1", time.Minute)
		doomed := f.claim(ts["doomed"].ID, "w1", time.Minute)
		if st := f.finish(doomed, store.FinishRequest{Outcome: store.OutcomeFailed, Permanent: true, Error: "cannot work"}); st != core.TaskDead {
			t.Fatalf("doomed is %s, want DEAD", st)
		}
		return run
	}

	plain := start("pair")
	if res := f.advance(); res.FailFastStopped != 0 {
		t.Fatalf("a failed run without fail_fast: %+v; want no task told to stop", res)
	}
	ff := start("pair-ff")
	if res := f.advance(); res.FailFastStopped != 1 {
		t.Fatalf("a failed fail_fast run with a task running: %+v; want it told to stop", res)
	}
	if got := next(t, cancels); !slices.Equal(got, []string{ff.String()}) {
		t.Fatalf("cancel channel after the fail_fast pass: %q; want [%s] (and nothing for %s, which has no fail_fast)", got, ff, plain)
	}
	if res := f.advance(); res.FailFastStopped != 0 {
		t.Fatalf("a second pass over the failed fail_fast run: %+v; want it told once", res)
	}

	events := listenOn(t, url, store.TasksChannel) // from here on
	if _, err := f.s.CancelRun(f.ctx, plain, "alice", "stop"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, cancels); !slices.Equal(got, []string{plain.String()}) {
		t.Fatalf("cancel channel after CancelRun: %q; want [%s]", got, plain)
	}
	if got := next(t, events); !slices.Equal(got, []string{plain.String()}) {
		t.Fatalf("TasksChannel after CancelRun: %q; want the schedulers woken for [%s]", got, plain)
	}
}
