package store

import (
	"slices"
	"strings"

	"github.com/google/uuid"
)

// This file is the one home of the TasksChannel payload: RunWake, its Go
// encoder (Encode, for the writes that notify through notifyAll), its SQL
// spelling (runWakeSQL, for qFinish, which notifies from inside its own
// statement) and its decoder (DecodeRunWake, for the schedulers' RunSet).

// RunWake is what TasksChannel notifications say: the runs whose tasks
// changed, for the schedulers to advance just those, or AnyRun ("runs not
// named"), for a sweep. A notification is a hint: the scheduler's periodic
// sweep covers any that are lost.
type RunWake struct {
	// Runs are the runs named (repeats allowed; Encode sends each once).
	Runs []uuid.UUID
	// AnyRun asks for a sweep: the write changed runs it does not name.
	AnyRun bool
	// Admit asks for an admission round only (AdmitWake): a flow-control
	// key may have room or waiters, and no run needs a pass.
	Admit bool
}

// runWakeItemBytes is a run id's length in a payload (uuid text, 36
// bytes), and runWakeSepBytes the separator's (a comma).
const (
	runWakeItemBytes = 36
	runWakeSepBytes  = 1
)

// runsPayloadMax bounds a TasksChannel payload below PostgreSQL's 8000
// byte limit on NOTIFY payloads.
const runsPayloadMax = 7900

// RunWakePerPayload is the most run ids one TasksChannel payload holds:
// as many as fit in runsPayloadMax bytes with their commas (213).
const RunWakePerPayload = (runsPayloadMax + runWakeSepBytes) / (runWakeItemBytes + runWakeSepBytes)

// RunWakePayloadsMax is the most TasksChannel payloads one write sends
// (1,704 runs): a write that changes more runs sends one AnyRun payload
// instead, and the schedulers sweep. The bound keeps a transaction's one
// NOTIFY statement, and the queue entries every listener reads, small.
const RunWakePayloadsMax = 8

// Encode returns the TasksChannel payloads that say w, for one write's one
// NOTIFY statement: the distinct run ids in ascending order (uuid byte
// order, which is their text's order), comma separated, RunWakePerPayload
// to a payload (the last one holding the rest); one AnyRun payload when w
// is AnyRun or its runs need more than RunWakePayloadsMax payloads. Nil
// for no runs (nothing to say); with Admit, AdmitWake after them (alone
// when no run is named). runWakeSQL spells the same encoding in
// SQL; TestTheFinishSpellsRunWakesAsEncodeDoes holds the two together.
func (w RunWake) Encode() []string {
	if w.AnyRun {
		return []string{AnyRun}
	}
	ids := slices.Clone(w.Runs)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	ids = slices.Compact(ids)
	if (len(ids)+RunWakePerPayload-1)/RunWakePerPayload > RunWakePayloadsMax {
		return []string{AnyRun}
	}
	var out []string
	for part := range slices.Chunk(ids, RunWakePerPayload) {
		items := make([]string, len(part))
		for i, id := range part {
			items[i] = id.String()
		}
		out = append(out, strings.Join(items, ","))
	}
	if w.Admit {
		out = append(out, AdmitWake)
	}
	return out
}

// DecodeRunWake reads one TasksChannel notification, given as the items
// of its payload (Listener.Wait splits it at the commas): each run id is
// named; AdmitWake asks for an admission round (Admit); AnyRun, an empty
// payload or any other item that is no run id asks for a sweep (AnyRun),
// since the write changed runs this reader cannot name.
func DecodeRunWake(items []string) RunWake {
	var w RunWake
	for _, it := range items {
		if it == AdmitWake {
			w.Admit = true
			continue
		}
		id, err := uuid.Parse(it)
		if err != nil {
			w.AnyRun = true
			continue
		}
		w.Runs = append(w.Runs, id)
	}
	return w
}

// runWakeBounds are the parameters a statement splicing runWakeSQL binds
// for wake_bounds: RunWakePerPayload and RunWakePayloadsMax, so that the
// numbers have their one home here.
func runWakeBounds() []any {
	return []any{int64(RunWakePerPayload), int64(RunWakePayloadsMax)}
}

// runWakeSQL is RunWake.Encode in SQL, for the statement that notifies
// from inside itself (qFinish: its SUCCEEDED and CANCELLED rows commit in
// a statement of their own). Spliced into a WITH list, it reads two
// relations the statement defines before it: woken(run_id), the runs
// changed (repeats allowed), and wake_bounds(per_payload, payloads_max),
// bound to runWakeBounds. Its last CTE, run_wake(part, payload), holds
// exactly the payloads Encode returns for the same runs, part numbering
// them in Encode's order: the distinct ids in ascending order,
// per_payload to a payload; one AnyRun payload when they need more than
// payloads_max; no row for no runs. TestTheFinishSpellsRunWakesAsEncodeDoes
// runs it over as many runs as one payload holds, one more, and as many as
// the payloads hold and one more, and compares it with Encode.
const runWakeSQL = `run_wake_ids AS (
    SELECT DISTINCT run_id FROM woken
), run_wake_parts AS (
    SELECT i.part, string_agg(i.run_id::text, ',' ORDER BY i.run_id) AS payload
      FROM (SELECT run_id, (row_number() OVER (ORDER BY run_id) - 1) / (SELECT per_payload FROM wake_bounds) AS part
              FROM run_wake_ids) i
     GROUP BY i.part
), run_wake AS (
    SELECT part, payload FROM run_wake_parts
     WHERE (SELECT count(*) FROM run_wake_parts) <= (SELECT payloads_max FROM wake_bounds)
    UNION ALL
    SELECT 0, '` + AnyRun + `'
     WHERE (SELECT count(*) FROM run_wake_parts) > (SELECT payloads_max FROM wake_bounds)
)`
