package cli

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/scheduler"
	"github.com/flowforge/flowforge/daemon/supervisor"
)

// ClockOffsetMaxDefault is `ffctl doctor --clock-offset-max`'s default.
const ClockOffsetMaxDefault = 2 * time.Second

// doctorCommand is `ffctl doctor`.
func doctorCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check the database for what no daemon should leave behind; --repair fixes what is safe (audited)",
		UsageText: "ffctl doctor [-o json] [--repair --reason R] [--sweep-interval D] [--full-sweep-interval D]\n" +
			"             [--redispatch-after D] [--clock-offset-max D] [--limit N]\n\n" +
			"Findings, one line each with its ids: stranded_ready, lease_expired, running_without_lease,\n" +
			"unsettled_run, finished_task_outbox (repairable); idempotency_key_owner_ended,\n" +
			"quarantined_outbox, schema_drift, clock_offset (left to a person). The scheduler flags\n" +
			"take the values the scheduler runs with (same FLOWFORGE_* variables).\n" +
			"--repair fixes each repairable finding in a transaction that re-checks it (a daemon acting\n" +
			"first wins), audited in the table doctor_repairs with --reason, and prints what it leaves.\n\n" +
			"Exit: 0 nothing found (or everything repaired), 1 findings remain, 2 bad input.\n\n" +
			"Example:\n  ffctl doctor\n  ffctl doctor -o json\n  ffctl doctor --repair --reason 'restored from backup 2026-12-01'",
		Flags: []cli.Flag{
			outputFlag(),
			&cli.BoolFlag{Name: "repair", Usage: "fix the repairable findings (requires --reason)"},
			reasonFlag(requiredReason("why the repair (with --repair)")),
			&cli.DurationFlag{Name: "sweep-interval", Usage: "the scheduler's sweep period: a lease expired more than two of them ago is reported", Value: scheduler.SweepIntervalDefault, EnvVars: []string{"FLOWFORGE_SWEEP_INTERVAL"}},
			&cli.DurationFlag{Name: "full-sweep-interval", Usage: "the scheduler's full-pass period: a run unsettled two of them after its last task ended is reported", Value: scheduler.FullSweepIntervalDefault, EnvVars: []string{"FLOWFORGE_FULL_SWEEP_INTERVAL"}},
			&cli.DurationFlag{Name: "redispatch-after", Usage: "the scheduler's redispatch delay: a READY task with no dispatch in flight for this plus two sweeps is reported", Value: scheduler.RedispatchAfterDefault, EnvVars: []string{"FLOWFORGE_REDISPATCH_AFTER"}},
			&cli.DurationFlag{Name: "clock-offset-max", Usage: "largest offset between a live daemon's clock and the database's not reported", Value: ClockOffsetMaxDefault, EnvVars: []string{"FLOWFORGE_CLOCK_OFFSET_MAX"}},
			limitFlag(1000),
		},
		Action: func(c *cli.Context) error { return doctor(c, env) },
	}
}

// doctorReport is the JSON of `ffctl doctor -o json`.
type doctorReport struct {
	Clean    bool                 `json:"clean"`
	Findings []store.Finding      `json:"findings"`
	Repairs  []store.RepairResult `json:"repairs,omitempty"`
	// Left are the findings left to a person after --repair, with what to do.
	Left []leftFinding `json:"left,omitempty"`
}

type leftFinding struct {
	store.Finding
	Todo string `json:"todo"`
}

// doctorConfig reads the thresholds; errors are usage errors.
func doctorConfig(c *cli.Context) (store.DiagnoseConfig, error) {
	cfg := store.DiagnoseConfig{
		SweepInterval: c.Duration("sweep-interval"), FullSweepInterval: c.Duration("full-sweep-interval"),
		RedispatchAfter: c.Duration("redispatch-after"), ClockOffsetMax: c.Duration("clock-offset-max"),
		LiveWithin: supervisor.IDLeaseDefault, Limit: c.Int("limit"),
	}
	for _, f := range []string{"sweep-interval", "full-sweep-interval", "redispatch-after", "clock-offset-max"} {
		if d := c.Duration(f); d <= 0 {
			return cfg, usageError("--%s must be positive, got %s", f, d)
		}
	}
	n, err := checkLimit(c)
	cfg.Limit = n
	return cfg, err
}

func doctor(c *cli.Context, env *Env) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if c.NArg() != 0 {
		return usageError("doctor takes no arguments, got %q", c.Args().First())
	}
	cfg, err := doctorConfig(c)
	if err != nil {
		return err
	}
	repair := c.Bool("repair")
	var reason string
	if repair {
		if reason, err = auditReason(c, env, bufio.NewReader(env.Stdin), "repair", "why the repair"); err != nil {
			return err
		}
	} else if c.IsSet("reason") {
		return usageError("--reason goes with --repair")
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	found, err := s.Diagnose(c.Context, cfg)
	if err != nil {
		return failure(err)
	}
	rep := doctorReport{Findings: found}
	if rep.Findings == nil {
		rep.Findings = []store.Finding{}
	}
	remaining := len(found)
	if repair {
		req := store.RepairRequest{Actor: actor(), Reason: reason, Config: cfg,
			Backoff: func(p core.RetryPolicy, attempt int) time.Duration { return p.Backoff(attempt, nil) }}
		if remaining, err = repairAll(c, s, found, req, &rep); err != nil {
			return failure(err)
		}
	}
	rep.Clean = remaining == 0
	if format == "json" {
		err = writeJSON(env.Stdout, rep)
	} else {
		writeDoctorText(env.Stdout, rep, repair)
	}
	if err != nil {
		return err
	}
	if remaining > 0 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("doctor: %d finding(s) remain", remaining)}
	}
	return nil
}

// repairAll repairs each repairable finding and lists the others in
// rep.Left; it returns how many findings remain.
func repairAll(c *cli.Context, s *store.Store, found []store.Finding, req store.RepairRequest, rep *doctorReport) (int, error) {
	remaining := 0
	for _, f := range found {
		if !f.Repairable {
			rep.Left = append(rep.Left, leftFinding{Finding: f, Todo: store.LeftToAPerson(f.Kind)})
			remaining++
			continue
		}
		res, err := s.Repair(c.Context, f, req)
		if err != nil {
			return 0, err
		}
		rep.Repairs = append(rep.Repairs, res)
		if !res.Repaired {
			remaining++
		}
	}
	return remaining, nil
}

// findingLine is a finding as one line: kind, its ids, the detail.
func findingLine(f store.Finding) string {
	parts := []string{string(f.Kind)}
	if f.RunID != nil {
		parts = append(parts, "run="+f.RunID.String())
	}
	if f.TaskRunID != nil {
		parts = append(parts, "task="+f.TaskRunID.String())
	}
	if f.OutboxID != nil {
		parts = append(parts, fmt.Sprintf("outbox=%d", *f.OutboxID))
	}
	if f.Key != nil {
		parts = append(parts, fmt.Sprintf("key=%q", *f.Key))
	}
	if f.WorkerID != nil {
		parts = append(parts, "worker="+*f.WorkerID)
	}
	if f.Token != nil {
		parts = append(parts, fmt.Sprintf("token=%d", *f.Token))
	}
	return core.TerminalText(strings.Join(parts, " ") + ": " + f.Detail)
}

func writeDoctorText(w io.Writer, rep doctorReport, repair bool) {
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "doctor: nothing found")
		return
	}
	if !repair {
		for _, f := range rep.Findings {
			fmt.Fprintln(w, findingLine(f))
		}
		return
	}
	for _, r := range rep.Repairs {
		verb := "repaired"
		if !r.Repaired {
			verb = "not repaired"
		}
		fmt.Fprintf(w, "%s: %s\n  %s\n", verb, findingLine(r.Finding), core.TerminalText(r.Detail))
	}
	for _, l := range rep.Left {
		fmt.Fprintf(w, "left to a person: %s\n  %s\n", findingLine(l.Finding), l.Todo)
	}
}
