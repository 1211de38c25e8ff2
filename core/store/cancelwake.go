package store

import (
	"strings"

	"github.com/google/uuid"
)

// This file is the one home of the CancelChannel payload: CancelWake, its
// encoder (cancelNotice, for the cancel and the fail_fast pass) and its
// decoder (DecodeCancelWake, for the workers).

// CancelAllRuns in a CancelChannel payload means "any run": listeners check
// every task they are running.
const CancelAllRuns = "*"

// cancelPayloadMax bounds a CancelChannel payload below PostgreSQL's 8000
// byte limit on NOTIFY payloads.
const cancelPayloadMax = 7900

// CancelWake is what a CancelChannel notification says: the runs whose
// running tasks should stop, or AllRuns (check every running task). It is
// a hint: a worker asks the database (its lease renewal) before it cancels
// anything.
type CancelWake struct {
	// Runs are the runs named.
	Runs []uuid.UUID
	// AllRuns asks for every running task to be checked: the runs did not
	// fit in one payload, or notifications may have been missed.
	AllRuns bool
}

// cancelNotice tells workers to check the running tasks of runs: their
// ids comma separated, or CancelAllRuns when they do not fit in
// cancelPayloadMax bytes.
func cancelNotice(runs []uuid.UUID) notice {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.String()
	}
	p := strings.Join(ids, ",")
	if len(p) > cancelPayloadMax {
		p = CancelAllRuns
	}
	return notice{CancelChannel, p}
}

// DecodeCancelWake reads one CancelChannel notification, given as the
// items of its payload (Listener.Wait splits it at the commas): each run
// id is named; CancelAllRuns, or nil items (a (re)connected listener,
// which may have missed notifications), ask for AllRuns. Items that are
// not run ids are ignored: a cancel cannot be asked for by a run it does
// not name.
func DecodeCancelWake(items []string) CancelWake {
	w := CancelWake{AllRuns: items == nil}
	for _, it := range items {
		if it == CancelAllRuns {
			w.AllRuns = true
			continue
		}
		if id, err := uuid.Parse(it); err == nil {
			w.Runs = append(w.Runs, id)
		}
	}
	return w
}
