package main

import (
	"fmt"
	"slices"
	"strings"
)

// Variants of the peers' samples.
const (
	varRiverBench    = "benchmark settings" // MaxWorkers 2000, FetchCooldown 2 ms, FetchPollInterval 20 ms
	varRiverDefaults = "defaults"
	varRiverMW100    = "MaxWorkers 100, defaults" // default fetch settings
	varCelery        = "prefork -c 2"
	varPgbench8      = "pgbench 8 clients"
	varPgbench32     = "pgbench 32 clients"
	varPublish       = "publish, confirms"
	varConsume       = "consume, manual ack"
)

// pickOf is a cell of workload w from the best of variants.
func pickOf(w string, variants ...string) pick { return pick{Workload: w, Variants: variants} }

// pickMetric is a cell showing another metric than its row's.
func pickMetric(metric, w string, variants ...string) pick {
	return pick{Workload: w, Variants: variants, Metric: metric}
}

// ffPicks are the FlowForge cells of workload w in the W2–W5 layout.
func ffPicks(w, mode string, extra map[string]pick) map[string]pick {
	m := map[string]pick{
		sysFF:       pickOf(w, "daemon "+mode),
		sysFFBefore: pickOf(w, "daemon "+mode),
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

const (
	naCeleryLatency = "no durable completion record without a result backend"
	naCeleryDAG     = "chains and chords need a result backend"
	naCeiling       = "see the ceiling rows"
	naNotCosted     = "FlowForge's cost only"
	naNoForEach     = "no for_each before issue 26"
)

// tableRows are the lines of the table, in order.
func tableRows(p plan) []rowSpec {
	mode := p.FFMode
	w1Both := []string{"daemon all", "daemon separate"}
	w1Any := append(slices.Clip(w1Both), "daemon "+modeSeparate64)
	rows := []rowSpec{
		{Label: "W1 burn-down, tasks/s (FF: best layout)", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", w1Any...), sysFFBefore: pickOf("W1", w1Any...), sysRiver: pickOf("W1", varRiverBench),
				sysCelery: pickOf("W1", varCelery), sysCeiling: pickMetric(metricOpsPerS, "C", varPgbench8)}},
		{Label: "W1 · daemon all / River defaults, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon all"), sysFFBefore: pickOf("W1", "daemon all"),
				sysRiver: pickOf("W1", varRiverDefaults), sysCeiling: pickMetric(metricOpsPerS, "C", varPgbench32)},
			NA: map[string]string{sysCelery: "one layout: row above"}},
		{Label: "W1 · separate daemons, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate"),
				sysCeiling: pickMetric(metricOpsPerS, "C", varPublish)},
			NA: map[string]string{sysRiver: "one client process", sysCelery: "one layout: row above"}},
		{Label: "W1 · separate daemons (defaults) ÷ River benchmark settings, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate"),
				sysRiver: pickOf("W1", varRiverBench)},
			NA: map[string]string{sysCelery: "one layout: row above", sysCeiling: "-"}},
		{Label: "W1 · separate daemons (defaults) ÷ River MaxWorkers 100, default fetch, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate"),
				sysRiver: pickOf("W1", varRiverMW100)},
			NA: map[string]string{sysCelery: "one layout: row above", sysCeiling: "-"}},
		{Label: "W1 · separate daemons (defaults) ÷ quorum queue publish+consume ceiling, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate"),
				sysCeiling: pickMetric(metricPubConsPerS, "C", varConsume)},
			NA: map[string]string{sysRiver: "no broker", sysCelery: "one layout: row above"}},
		{Label: "W1 · separate daemons, worker --concurrency 64, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon "+modeSeparate64), sysFFBefore: pickOf("W1", "daemon "+modeSeparate64),
				sysRiver: pickOf("W1", varRiverBench)},
			NA: map[string]string{sysCelery: "one layout: row above", sysCeiling: "-"}},
		{Label: "W1 ÷ quorum queue publish+consume ceiling, tasks/s", Metric: metricTasksPerS, HigherBetter: true,
			Cells: map[string]pick{sysFF: pickOf("W1", w1Any...), sysFFBefore: pickOf("W1", w1Any...),
				sysCeiling: pickMetric(metricPubConsPerS, "C", varConsume)},
			NA: map[string]string{sysRiver: "no broker", sysCelery: "one layout: row above"}},
		{Label: "W1 · separate daemons (defaults), PostgreSQL CPU ms per task (drain)", Metric: metricDrainPgCPU,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate")},
			NA:    map[string]string{sysRiver: naNotCosted, sysCelery: naNotCosted, sysCeiling: "-"}},
		{Label: "W1 · separate daemons (defaults), write commits per task (drain)", Metric: metricDrainCommits,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon separate"), sysFFBefore: pickOf("W1", "daemon separate")},
			NA:    map[string]string{sysRiver: naNotCosted, sysCelery: naNotCosted, sysCeiling: "-"}},
		{Label: "W1 peak worker RSS, --concurrency 64, MiB", Metric: metricWorkerRSS,
			Cells: map[string]pick{sysFF: pickOf("W1", "daemon "+modeSeparate64), sysFFBefore: pickOf("W1", "daemon "+modeSeparate64)},
			NA:    map[string]string{sysRiver: "-", sysCelery: "-", sysCeiling: "-"}},
	}
	rows = append(append(rows, flowRows(p, "W1")...), logRows()...)
	rows = append(rows, []rowSpec{
		{Label: "W2 continuous, runs/s", Metric: metricRunsPerS, HigherBetter: true,
			Cells: ffPicks("W2", mode, map[string]pick{sysRiver: pickOf("W2", varRiverBench), sysCelery: pickOf("W2", varCelery)}),
			NA:    map[string]string{sysCeiling: naCeiling}},
		{Label: "W2 · worker --concurrency 64, runs/s", Metric: metricRunsPerS, HigherBetter: true,
			Cells: ffPicks("W2", modeAll64, map[string]pick{sysRiver: pickOf("W2", varRiverBench)}),
			NA:    map[string]string{sysCelery: "one layout: row above", sysCeiling: naCeiling}},
		{Label: "W2 · worker --concurrency 64, p50 trigger→completion committed, ms", Metric: metricP50,
			Cells: ffPicks("W2", modeAll64, map[string]pick{sysRiver: pickOf("W2", varRiverBench)}),
			NA:    map[string]string{sysCelery: naCeleryLatency, sysCeiling: "-"}},
	}...)
	for _, l := range []struct{ label, metric, na string }{
		{"W2 p50 trigger→completion committed, ms", metricP50, naCeleryLatency},
		{"W2 p99 trigger→completion committed, ms", metricP99, naCeleryLatency},
		{"W2 p50 trigger→completion stamp, ms", metricStampP50, naCeleryLatency},
		{"W2 p99 trigger→completion stamp, ms", metricStampP99, naCeleryLatency},
	} {
		rows = append(rows, rowSpec{Label: l.label, Metric: l.metric,
			Cells: ffPicks("W2", mode, map[string]pick{sysRiver: pickOf("W2", varRiverBench)}),
			NA:    map[string]string{sysCelery: l.na, sysCeiling: "-"}})
	}
	return append(append(append(append(append(append(rows, flowRows(p, "W2")...), obsRows()...), openRows(p)...), dagRows(p)...), triggerRows()...), retentionRows(p)...)
}

func dagRows(p plan) []rowSpec {
	mode := p.FFMode
	river := func(w string) map[string]pick {
		return ffPicks(w, mode, map[string]pick{sysRiver: pickOf(w, varRiverBench)})
	}
	na := map[string]string{sysCelery: naCeleryDAG, sysCeiling: "-"}
	rows := []rowSpec{
		{Label: fmt.Sprintf("W3 chain of %d, p50 ms", chainSteps), Metric: metricP50, Cells: river("W3"), NA: na},
		{Label: fmt.Sprintf("W3 chain of %d, p99 ms", chainSteps), Metric: metricP99, Cells: river("W3"), NA: na},
		{Label: fmt.Sprintf("W4 fan-out %d + join, s", fanWidth), Metric: metricWallS, Cells: river("W4"), NA: na},
		// W4e: no peer has for_each; River's cell is its W4 (the nearest it
		// has: fanWidth jobs and a join), so that FF÷River compares the
		// for_each with River's static fan-out.
		{Label: fmt.Sprintf("W4e for_each %d + join (River: its W4 static fan-out), s", forEachWidth), Metric: metricWallS,
			Cells: map[string]pick{sysFF: pickOf(workloadForEach, "daemon "+mode), sysRiver: pickOf("W4", varRiverBench)},
			NA:    map[string]string{sysFFBefore: naNoForEach, sysCelery: "no for_each; " + naCeleryDAG, sysCeiling: "-"}},
		{Label: fmt.Sprintf("W4e for_each %d ÷ W4 static fan-out %d, same daemons, paired", forEachWidth, fanWidth), Metric: metricOverStatic,
			Cells: map[string]pick{sysFF: pickOf(workloadForEach, "daemon "+mode)},
			NA:    map[string]string{sysFFBefore: naNoForEach, sysRiver: "no for_each", sysCelery: "no for_each", sysCeiling: "-"}},
		{Label: "W5 history, runs/s", Metric: metricRunsPerS, HigherBetter: true, Cells: river("W5"),
			NA: map[string]string{sysCelery: "no history: Celery keeps none", sysCeiling: "-"}},
		{Label: "W5 history, p50 ms", Metric: metricP50, Cells: river("W5"), NA: map[string]string{sysCelery: naCeleryLatency, sysCeiling: "-"}},
		{Label: "W5 history, p99 ms", Metric: metricP99, Cells: river("W5"), NA: map[string]string{sysCelery: naCeleryLatency, sysCeiling: "-"}},
		{Label: "W5 buffers/call, worst history÷fresh", Metric: metricBufRatioMax,
			Cells: map[string]pick{sysFF: pickOf("W5", "buffers"), sysFFBefore: pickOf("W5", "buffers")},
			NA:    map[string]string{sysRiver: "FlowForge's daemons' statements only", sysCelery: "-", sysCeiling: "-"}},
		{Label: "W5 buffers/call, largest growth history−fresh", Metric: metricBufGrowthMax,
			Cells: map[string]pick{sysFF: pickOf("W5", "buffers"), sysFFBefore: pickOf("W5", "buffers")},
			NA:    map[string]string{sysRiver: "FlowForge's daemons' statements only", sysCelery: "-", sysCeiling: "-"}},
	}
	for _, c := range []struct{ label, variant string }{
		{"ceiling: pgbench 1-row UPDATE, 8 clients, tx/s", varPgbench8},
		{"ceiling: pgbench 1-row UPDATE, 32 clients, tx/s", varPgbench32},
		{"ceiling: quorum queue publish (confirms, window 200), msg/s", varPublish},
		{"ceiling: quorum queue consume (manual ack), msg/s", varConsume},
	} {
		rows = append(rows, rowSpec{Label: c.label, Metric: metricOpsPerS, HigherBetter: true,
			Cells: map[string]pick{sysCeiling: pickOf("C", c.variant)},
			NA:    map[string]string{sysFF: "-", sysFFBefore: "-", sysRiver: "-", sysCelery: "-"}})
	}
	return rows
}

// methodNotes explain how the figures were taken; printed under the table
// and kept in the results file.
func methodNotes(p plan) []string {
	notes := []string{
		"Each system runs alone; rounds are interleaved (round 1 of every system, then round 2 …, the order rotating). Cells: median (min–max) over the rounds.",
		"Latency is read on the database clock: from the row's created_at (now() of the trigger's/insert's transaction) to the commit time of the transaction that completed it (pg_xact_commit_timestamp(xmin), track_commit_timestamp=on) — 'committed' — or to the completion's own stamp (FlowForge finished_at, River finalized_at) — 'stamp'. FlowForge's SUCCEEDED committed compares with River's completion committed.",
		"W1: the backlog is created before any consumer runs; the clock runs from starting the consumers to the last completion's commit. FlowForge has no bulk trigger: its backlog is created by 8 concurrent store.Trigger calls (not timed).",
		fmt.Sprintf("W4: core.MaxTasks (1000) caps a workflow, so the fan-out is %d tasks and a join. River has no DAG: a chain step completes its job and inserts the next in one transaction (JobCompleteTx); the fan-out's join is inserted by the last of the %d jobs to finish (a counter row updated in the completing transaction).", fanWidth, fanWidth),
		fmt.Sprintf("W4e: one run of a noop for_each task over a literal list of %d integers and a join below it (%d task runs: the scheduler's pass makes the elements READY with their dispatches in one transaction, and ends the for_each task once they have all succeeded, before the join is promoted); wall time trigger → SUCCEEDED committed. The job also runs W4's static fan-out (%d tasks and a join) on the same daemons, the two runs taking turns going first, and the ratio row is the for_each's wall time over that one's, round by round. No peer has for_each: River's cell is its W4, a static fan-out, and FF÷River compares the two.", forEachWidth, forEachWidth+2, fanWidth),
		"W5: W2 on a clone (CREATE DATABASE … TEMPLATE … STRATEGY FILE_COPY) of a database holding the history; the buffers rows compare shared_blks_hit+read per call of every statement of a fixed serial workload (single-task runs one at a time) on a fresh clone and on the history clone: the worst ratio and the largest growth. A few buffers more per call is each B-tree one level deeper (logarithmic); a statement that scanned history would touch thousands more.",
		"W7: W2 and the dashboard refresh (the reads of ffctl tui, 200 times) on a clone of a database whose backdated history (2,000,000 finished runs; quick: 200,000) the pruner deleted, then VACUUM ANALYZE (not FULL), against a clone of a fresh database, alternated three times; ratios of the medians, pruned ÷ fresh.",
		"W2/W5: 8 closed loops, each waiting for its trigger (FlowForge store.Trigger, River InsertTx + commit) to commit, never for the run; runs/s and percentiles are of the runs triggered and completed inside the window (a backlog left at its end is not waited for). A system slower than its triggerers queues, and its latency is then mostly queueing.",
		fmt.Sprintf("W2o open loop: single-task runs triggered at %g a second for %.0f s on a fixed schedule (trigger i due i/rate after the start, issued by the first of %d triggerers free; one that is late is recorded as lag, never skipped), then up to %.0f s for the system to finish them. FlowForge: fftrigger's store.Trigger against separate daemons at the tree's defaults; River: InsertTx + commit, its default fetch settings, MaxWorkers 2000. Triggers issued/s = n ÷ (the last one's issue time + one interval). Runs/s: completions committed inside the window (from the first run's created_at) per second of it; the percentiles are of every triggered run, created_at → completion committed, a run still open at the end counted with its age then (a lower bound; the finished row says whether any was).", p.OpenRate, p.OpenWindow.Seconds(), openTriggerers, p.OpenDrain.Seconds()),
		flowNote(p),
		logNote(),
		obsNote(),
		w6Note(p),
		"W5 history: 1,000,000 copies of a real finished run (all its rows: run, task run, events, outbox row), spread over the last 20 h, built once with the before column's build and migrated with the current ffctl for the current column (both leave the same 10 rows per run); River's is 1,000,000 completed jobs over the same 20 h (inside its 24 h retention, so its cleaner stays idle).",
		"River: the client runs in the driver process; 'defaults' is River's default fetch settings (FetchCooldown 100 ms, FetchPollInterval 1 s) with MaxWorkers 2000, which has no default; '" + varRiverMW100 + "' (W1 only) the same fetch settings with MaxWorkers 100. The W1 rows 'separate daemons (defaults) ÷ …' put FlowForge's separate layout at the tree's defaults beside River at its benchmark settings, beside River at MaxWorkers 100 and default fetch, and beside the publish+consume ceiling (FF÷River, FF÷ceiling).",
		"Celery: -P prefork -c 2, acks_late, a no-op task, a durable classic queue (Celery 5.2's global QoS rules out quorum queues), publisher confirms; its burn-down ends when the broker's global ack counter has counted the backlog (rabbitmq_prometheus, polled every 50 ms). Without a result backend it records no completion, so it has no latency figures, no chains and no chords.",
		"FF÷ceiling: FlowForge's figure over the ceiling cell of its row, measured in the same run. The publish+consume ceiling is n ÷ (publish s + consume s) of the raw quorum-queue measurement (every dispatch is published once and consumed once): where FF÷ceiling nears 1 the broker is the limit; far below 1 it is not, and the limit is the work per task in the processes and PostgreSQL.",
		"W1/W2 at --concurrency 64: the rows without it run the worker's default --concurrency, whatever the tree ships (read from its ffctl, printed below the notes); River runs MaxWorkers 2000. The c64 rows show FlowForge with 64 slots to batch over, the setting to compare with River's.",
		"W1 peak worker RSS: W1 with separate daemons and the worker at --concurrency 64 (its own variant, \"daemon separate c64\"); VmHWM of the worker process read from /proc just before its SIGTERM, in MiB (issue 14's bound: 50 MiB).",
		"W2/W5 publisher's share (in the results file and the progress lines, outbox_p50_ms/outbox_p99_ms; W1 outbox_span_s): trigger → the outbox row's stamp committed, on the database clock.",
		"FlowForge cost per task (below the table, and the two W1 drain rows): W1's trigger and drain phases; write commits are WAL COMMIT records (pg_waldump), statements are pg_stat_statements calls of the daemons' role (the driver's own queries run as another role), CPU from /proc (PostgreSQL's and RabbitMQ's process trees) and each daemon process's rusage. The statement table is the last round's: calls per task, per call the execution and planning time (pg_stat_statements.track_planning on; plan ms/call counts only the calls that were planned, plans/call of them), shared buffers hit+read and WAL bytes.",
	}
	if p.Quick {
		notes = append(notes, fmt.Sprintf("make bench-quick: one round, small backlogs (no 10 s minimum drain), %v windows (W2o: %v), W5 history of %d task runs instead of 1,000,000.", p.Continuous, p.OpenWindow, p.History))
	}
	return notes
}

// renderReport is the printed output: the table, then the notes.
func renderReport(res results) string {
	var b strings.Builder
	m := res.Machine
	fmt.Fprintf(&b, "\nmachine: %s, %d cores, %.0f GB, Linux %s, %s; load average %s at start, %s at end; PostgreSQL %s, %s\n",
		m.CPU, m.Cores, m.MemoryGB, m.Kernel, m.Go, m.LoadStart, m.LoadEnd, res.Servers["postgresql"], res.Servers["rabbitmq"])
	b.WriteString("\n" + renderTable(res.Rows) + "\n")
	for _, n := range res.Notes {
		b.WriteString("- " + n + "\n")
	}
	for _, k := range sortedKeys(res.Systems) {
		if d := res.Systems[k].Defaults; d != "" {
			fmt.Fprintf(&b, "- %s (%s): defaults as shipped: %s\n", systemLabels[k], res.Systems[k].Version, d)
		}
		if u := res.Systems[k].Unavailable; u != "" {
			fmt.Fprintf(&b, "- %s: N/A: %s\n", systemLabels[k], u)
		}
	}
	b.WriteString(renderCosts(res.Samples))
	return b.String()
}
