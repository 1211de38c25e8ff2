package schedule

import (
	"fmt"
	"time"

	"github.com/flowforge/flowforge/core"
)

// A workflow file's `schedules:` (core.ScheduleDef) are schedules owned by
// the file (OwnerFile) of its workflow: the store keeps them in the
// schedules table only, not in the stored definition (a version names what
// runs, a schedule says when).

// FromFile converts the `schedules:` entries of the workflow file of
// workflow into definitions owned by the file (OwnerFile), unchecked.
func FromFile(workflow string, defs []core.ScheduleDef) []Definition {
	out := make([]Definition, 0, len(defs))
	for _, d := range defs {
		spec := Definition{
			Name: d.Name, Workflow: workflow, Cron: d.Cron, Timezone: d.Timezone, Params: d.Params,
			Overlap: Overlap(d.Overlap), Catchup: Catchup(d.Catchup), Owner: OwnerFile,
		}
		if d.CatchupWindow != nil {
			spec.CatchupWindow = time.Duration(*d.CatchupWindow)
		}
		if d.Jitter != nil {
			spec.Jitter = time.Duration(*d.Jitter)
		}
		out = append(out, spec)
	}
	return out
}

// ValidateFile checks specs, the schedules of def's workflow file, without
// the database: each is of def's workflow and owned by the file, passes
// Validate (cron, zone, policies, durations, params), and every task
// idempotency key and params template of def renders from its params
// (core.RenderRunTasks). It returns them as Validate returns them
// (defaults filled in), in order. The error names the schedule:
// `schedule "nightly": invalid schedule: ...`; it wraps ErrBadSchedule or
// core.ErrBadParams.
func ValidateFile(def *core.Definition, specs []Definition) ([]Definition, error) {
	out := make([]Definition, 0, len(specs))
	for _, spec := range specs {
		if spec.Workflow != def.Name {
			return nil, fmt.Errorf("schedule %q: %w: workflow %q is not the file's (%q)", spec.Name, ErrBadSchedule, spec.Workflow, def.Name)
		}
		if spec.Owner != OwnerFile {
			return nil, fmt.Errorf("schedule %q: %w: owner %q, want file", spec.Name, ErrBadSchedule, spec.Owner)
		}
		c, err := Validate(spec)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", spec.Name, err)
		}
		if _, err := core.RenderRunTasks(def, c.Params); err != nil {
			return nil, fmt.Errorf("schedule %q: %w", spec.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}
