package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/flowforge/flowforge/core"
)

// TestParseWorkflowFileReadsSchedules: the schedules: list is read apart
// from the definition (which stays as without it); ParseDefinition, which
// stores no schedules, still refuses the field.
func TestParseWorkflowFileReadsSchedules(t *testing.T) {
	src := validYAML + `schedules:
  - name: nightly
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    params: {date: today}
    overlap: allow
    catchup: one
    catchup_window: 1h
    jitter: 30s
  - {name: hourly, cron: "@hourly"}
`
	f, err := core.ParseWorkflowFile([]byte(src))
	if err != nil {
		t.Fatalf("ParseWorkflowFile: %v", err)
	}
	plain, err := core.ParseDefinition([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if f.Definition.Name != plain.Name || len(f.Definition.Tasks) != len(plain.Tasks) {
		t.Fatalf("definition %+v, want %+v", f.Definition, plain)
	}
	if len(f.Schedules) != 2 {
		t.Fatalf("schedules %+v", f.Schedules)
	}
	n := f.Schedules[0]
	if n.Name != "nightly" || n.Cron != "30 2 * * *" || n.Timezone != "Europe/Berlin" || string(n.Params) != `{"date":"today"}` ||
		n.Overlap != "allow" || n.Catchup != "one" || time.Duration(*n.CatchupWindow) != time.Hour || time.Duration(*n.Jitter) != 30*time.Second {
		t.Fatalf("nightly = %+v", n)
	}
	if h := f.Schedules[1]; h.Name != "hourly" || h.Cron != "@hourly" || h.CatchupWindow != nil || h.Jitter != nil {
		t.Fatalf("hourly = %+v", h)
	}
	if f, err := core.ParseWorkflowFile([]byte(validJSON)); err != nil || len(f.Schedules) != 0 || f.Schedules == nil {
		t.Fatalf("a file without schedules: %+v, %v (want an empty list)", f, err)
	}
	_, err = core.ParseDefinition([]byte(src))
	if !errors.Is(err, core.ErrBadWorkflow) || err.Error() != `invalid workflow: unknown field "schedules"` {
		t.Fatalf("ParseDefinition of a file with schedules: %v", err)
	}
}

func TestParseWorkflowFileRefusesBadSchedules(t *testing.T) {
	const head = "name: w\ntasks:\n  - {name: a, handler: noop}\nschedules:\n"
	for _, c := range []struct{ entries, want string }{
		{"  - {name: n, cron: '@daily', every: 1h}\n", `invalid workflow: schedule "n": unknown field "every"`},
		{"  - {name: n, cron: [1]}\n", `invalid workflow: schedule "n": cron: cannot unmarshal array into Go struct field ScheduleDef.cron of type string`},
		{"  - {name: n, cron: '@daily', catchup_window: soon}\n", `invalid workflow: schedule "n": catchup_window: unparseable duration "soon" (use Go syntax such as "30s", "5m" or "24h", or days: "7d", "1d12h")`},
		{"  - just-a-name\n", `invalid workflow: schedules[0]: want a mapping (name, cron, ...)`},
		{"  - {cron: '@daily'}\n", `invalid workflow: schedules[0]: schedule name is missing`},
		{"  - {name: n, cron: '@daily'}\n  - {name: n, cron: '@daily'}\n", `invalid workflow: schedule "n" is declared twice`},
		{"  {name: n}\n", `invalid workflow: schedules: want a list of schedules (name, cron, ...)`},
	} {
		_, err := core.ParseWorkflowFile([]byte(head + c.entries))
		if !errors.Is(err, core.ErrBadWorkflow) || err.Error() != c.want {
			t.Errorf("%q:\n got %v\nwant %s", c.entries, err, c.want)
		}
	}
}
