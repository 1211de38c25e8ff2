package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// applyFile parses a workflow file and applies it with its schedules.
func (f *fixture) applyFile(src string) ([]store.ScheduleChange, error) {
	f.t.Helper()
	file, err := core.ParseWorkflowFile([]byte(src))
	if err != nil {
		f.t.Fatalf("parse: %v", err)
	}
	_, _, changes, err := f.s.ApplyWorkflowFile(f.ctx, file.Definition, store.FileScheduleSpecs(file.Definition.Name, file.Schedules), "test")
	return changes, err
}

// TestConcurrentFilesRacingForOneScheduleNameOneWins: the files of eight
// workflows, applied at once, all declare schedule "shared": exactly one
// apply commits; each other one is refused naming the winner's workflow
// and stores nothing (no version, not its own schedule).
func TestConcurrentFilesRacingForOneScheduleNameOneWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 8
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			src := fmt.Sprintf("name: wf-%d\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: own-%d, cron: '@daily'}\n  - {name: shared, cron: '@hourly'}\n", i, i)
			_, errs[i] = f.applyFile(src)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("wf-%d and wf-%d both applied a schedule named shared", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no apply won: %v", errs)
	}
	want := fmt.Sprintf(`schedule "shared" is declared in the workflow file of wf-%d: rename it in one of the files (nothing applied)`, winner)
	for i, err := range errs {
		if i != winner && (!errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), want)) {
			t.Errorf("wf-%d: %v, want ErrConflict %q", i, err, want)
		}
	}
	if w, s := f.count(`SELECT count(*) FROM workflows`), f.count(`SELECT count(*) FROM schedules`); w != 1 || s != 2 {
		t.Fatalf("%d workflow versions and %d schedules stored, want the winner's 1 and 2", w, s)
	}
	if e := f.count(`SELECT count(*) FROM schedule_events`); e != 2 {
		t.Fatalf("%d audit rows, want the winner's 2 creates", e)
	}
}

// TestConcurrentAppliesOfOneFileAreSerialised: applies of one workflow's
// file with different crons, at once, all commit one after another: one
// creates the schedule, each other one updates it (or finds it unchanged),
// and every change has its audit row.
func TestConcurrentAppliesOfOneFileAreSerialised(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 6
	changes := make([][]store.ScheduleChange, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			changes[i], errs[i] = f.applyFile(fmt.Sprintf("name: etl\ntasks:\n  - {name: a, handler: noop}\nschedules:\n  - {name: etl-at, cron: '%d 3 * * *'}\n", i))
		}()
	}
	close(start)
	wg.Wait()
	created, written := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("apply %d: %v", i, errs[i])
		}
		switch a := changes[i][0].Action; a {
		case "created":
			created++
			written++
		case "updated":
			written++
		case "unchanged":
		default:
			t.Fatalf("apply %d: action %q", i, a)
		}
	}
	if created != 1 {
		t.Fatalf("%d applies created the schedule, want 1", created)
	}
	if e := f.count(`SELECT count(*) FROM schedule_events`); e != written {
		t.Fatalf("%d audit rows for %d changes", e, written)
	}
	if w := f.count(`SELECT count(*) FROM workflows`); w != 1 {
		t.Fatalf("%d versions of one unchanged definition", w)
	}
}
