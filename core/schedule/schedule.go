// Package schedule holds the cron side of FlowForge's schedules: parsing a
// cron expression in a time zone (github.com/robfig/cron/v3 does the
// parsing and the DST arithmetic), the next fire times, the ticks due in a
// span, the catch-up policy applied to missed ticks, and the per-tick
// jitter; and a schedule's fields (Definition) with their validation
// (Validate, ValidateFile for a workflow file's schedules), which the CLI
// runs before it connects and the store before it writes. It speaks no
// SQL and reads no clock: every "now" is passed in, and callers pass the
// database's.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrBadSchedule is wrapped by every refusal of a schedule's fields: a cron
// expression that does not parse, an unknown time zone, a bad policy or a
// negative duration. The message names the field and the value.
var ErrBadSchedule = errors.New("invalid schedule")

// Overlap is what a tick does while the previous run of its schedule is
// still open (PENDING or RUNNING).
type Overlap string

// The overlap policies.
const (
	// OverlapSkip records the tick as skipped and starts no run.
	OverlapSkip Overlap = "skip"
	// OverlapAllow starts the run anyway.
	OverlapAllow Overlap = "allow"
	// OverlapCancelPrevious cancels the open previous run (the ordinary
	// cancel path) and starts the new one.
	OverlapCancelPrevious Overlap = "cancel-previous"
)

// Catchup is what happens to the ticks a schedule missed (no scheduler ran
// while they came due, see Missed).
type Catchup string

// The catch-up policies.
const (
	// CatchupNone drops every missed tick: the next tick is the next one
	// in the future.
	CatchupNone Catchup = "none"
	// CatchupOne fires the latest missed tick within the catch-up window.
	CatchupOne Catchup = "one"
	// CatchupAll fires every missed tick within the catch-up window,
	// oldest first.
	CatchupAll Catchup = "all"
)

// ParseOverlap returns the overlap policy named s ("" is OverlapSkip).
// Errors wrap ErrBadSchedule.
func ParseOverlap(s string) (Overlap, error) {
	switch o := Overlap(s); o {
	case "":
		return OverlapSkip, nil
	case OverlapSkip, OverlapAllow, OverlapCancelPrevious:
		return o, nil
	}
	return "", fmt.Errorf("%w: overlap policy %q: want skip, allow or cancel-previous", ErrBadSchedule, s)
}

// ParseCatchup returns the catch-up policy named s ("" is CatchupNone).
// Errors wrap ErrBadSchedule.
func ParseCatchup(s string) (Catchup, error) {
	switch c := Catchup(s); c {
	case "":
		return CatchupNone, nil
	case CatchupNone, CatchupOne, CatchupAll:
		return c, nil
	}
	return "", fmt.Errorf("%w: catch-up policy %q: want none, one or all", ErrBadSchedule, s)
}

// parser accepts the standard five fields, an optional leading seconds
// field (six fields) and the @hourly/@daily/@weekly/@monthly/@yearly/
// @every descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in a time zone. Its times are in the
// zone's time.Location; the library applies the zone's DST rules: a wall
// time that does not exist on a spring-forward day does not fire that day
// (a daily 02:30 in Europe/Berlin skips the last Sunday of March), and one
// that occurs twice on a fall-back day fires at both occurrences (that
// daily 02:30 fires at 00:30 and 01:30 UTC on the last Sunday of
// October), as an hourly expression fires each real hour.
type Spec struct {
	expr  string
	loc   *time.Location
	sched cron.Schedule
}

// Parse parses a cron expression (5 fields, 6 with seconds first, or a
// descriptor such as "@daily") in the IANA time zone zone ("" is UTC). A
// "CRON_TZ=" or "TZ=" prefix is refused: the zone is its own field. Errors
// wrap ErrBadSchedule: `invalid schedule: cron "x": <the library's
// reason>`, `invalid schedule: unknown time zone "Mars/Olympus"`; an
// "@every" interval below 1s (`cron "@every 1ms": an @every interval must
// be at least 1s, got 1ms`) or not whole seconds (`cron "@every 1.5s": an
// @every interval must be whole seconds, got 1.5s`) and an expression that never fires (`cron "0
// 0 30 2 *": never fires (no time matches it)`) are refused too.
func Parse(expr, zone string) (*Spec, error) {
	loc, err := Location(zone)
	if err != nil {
		return nil, err
	}
	e := strings.TrimSpace(expr)
	if e == "" {
		return nil, fmt.Errorf("%w: cron expression is missing", ErrBadSchedule)
	}
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, fmt.Errorf("%w: cron %q: give the time zone with the timezone field, not in the expression", ErrBadSchedule, expr)
	}
	if d, ok := strings.CutPrefix(e, "@every "); ok {
		// The library rounds an interval below 1s up to 1s (a negative
		// or zero one too): refuse it instead of firing every second.
		every, err := time.ParseDuration(strings.TrimSpace(d))
		switch {
		case err == nil && every < time.Second:
			return nil, fmt.Errorf("%w: cron %q: an @every interval must be at least 1s, got %v", ErrBadSchedule, expr, every)
		case err == nil && every%time.Second != 0:
			// The library truncates it to whole seconds: "@every 1.5s"
			// would fire every second (a trial finding).
			return nil, fmt.Errorf("%w: cron %q: an @every interval must be whole seconds, got %v", ErrBadSchedule, expr, every)
		}
	}
	sched, err := parser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %v", ErrBadSchedule, expr, err)
	}
	spec := &Spec{expr: e, loc: loc, sched: sched}
	// The library's Next returns the zero time when nothing matches
	// within its search horizon (five years): such an expression (30
	// February) never fires.
	if spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, loc)).IsZero() {
		return nil, fmt.Errorf("%w: cron %q: never fires (no time matches it)", ErrBadSchedule, expr)
	}
	return spec, nil
}

// Location returns the IANA time zone zone ("" and "UTC" are UTC; "Local"
// is refused: it would differ from host to host). Errors wrap
// ErrBadSchedule.
func Location(zone string) (*time.Location, error) {
	switch zone {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%w: time zone %q: name an IANA zone such as Europe/Berlin", ErrBadSchedule, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q", ErrBadSchedule, zone)
	}
	return loc, nil
}

// Location is the spec's time zone.
func (s *Spec) Location() *time.Location { return s.loc }

// Next is the first fire time strictly after t, in the spec's zone; the
// zero time when there is none (an expression that never matches, such
// as "0 0 30 2 *").
func (s *Spec) Next(t time.Time) time.Time {
	return s.sched.Next(t.In(s.loc))
}

// NextN is the next n fire times strictly after t, in the spec's zone
// (fewer when the expression stops matching).
func (s *Spec) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for range n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// Between is the fire times in (after, until], oldest first, at most max
// of them (the oldest max).
func (s *Spec) Between(after, until time.Time, max int) []time.Time {
	var out []time.Time
	for t := s.Next(after); !t.IsZero() && !t.After(until) && len(out) < max; t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

// maxNextScan bounds the fire times NextFireTimes looks at beyond the n
// it returns (those already due at now, within the jitter before it: one
// or two, a jitter being below the gap between fire times).
const maxNextScan = 1000

// NextFireTimes is the next n ticks of w that a scheduler has yet to fire
// at now (the database's clock), oldest first, in w's zone: the fire times
// after w.After, its last-fired point, from the first whose jittered start
// (its time plus Jitter) is after now — the ticks Due fires once now has
// passed their start, and the times `ffctl schedule` and the dashboard
// show (without the jitter). A cron expression's are its fire times after
// now (and the one before now whose jitter holds it back); an "@every d"
// schedule's are counted from its last-fired point, as Due counts them
// (created at 10:00:00.7, "@every 30s" fires at 10:00:30, 10:01:00, ...,
// whenever it is read). A last-fired point far in the past costs nothing:
// whole periods are skipped arithmetically, not stepped through. Nil when
// n <= 0 or the expression fires no more.
func NextFireTimes(w Window, now time.Time, n int) []time.Time {
	if n <= 0 {
		return nil
	}
	// A tick at or before floor starts (its jitter below w.Jitter) at or
	// before now: fired, due now, or missed.
	floor := now.Add(-w.Jitter)
	from := w.After
	if every, ok := w.Spec.sched.(cron.ConstantDelaySchedule); ok {
		// Whole periods, to stay on the grid of the last-fired point;
		// a loop, since a span longer than ~292 years overflows one
		// Duration.
		for from.Before(floor) {
			k := floor.Sub(from) / every.Delay
			if k <= 0 {
				break
			}
			from = from.Add(k * every.Delay)
		}
	} else if from.Before(floor) {
		from = floor
	}
	var out []time.Time
	for t, i := w.Spec.Next(from), 0; !t.IsZero() && len(out) < n && i < n+maxNextScan; t, i = w.Spec.Next(t), i+1 {
		// Ticks fire in order: once one is still to come, so is every
		// later one.
		if len(out) > 0 || t.Add(Jitter(w.Name, t, w.Jitter)).After(now) {
			out = append(out, t)
		}
	}
	return out
}

// Jitter is the delay of the run of the tick of schedule name at tick:
// a deterministic value in [0, max) (0 when max is 0), so that every
// scheduler computes the same due time for the same tick.
func Jitter(name string, tick time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d", name, tick.UnixNano())
	return time.Duration(h.Sum64() % uint64(max))
}

// Window is the state Due needs of one schedule.
type Window struct {
	// Name is the schedule's name (the jitter's seed).
	Name string
	// Spec is its parsed cron expression.
	Spec *Spec
	// After is its last-fired point: ticks at or before it are done.
	After time.Time
	// Catchup and CatchupWindow: the policy for missed ticks and how far
	// back (from now) a missed tick may still fire.
	Catchup       Catchup
	CatchupWindow time.Duration
	// Jitter bounds each tick's delay (see Jitter).
	Jitter time.Duration
}

// Decision is what Due decided for one schedule.
type Decision struct {
	// Fire is the ticks to fire now, oldest first.
	Fire []time.Time
	// Missed counts the missed ticks the policy dropped (those older
	// than every window: up to 100000).
	Missed int
	// FirstMissed and LastMissed are the oldest and the newest of the
	// dropped ticks (zero when Missed is 0).
	FirstMissed, LastMissed time.Time
	// Through is the new last-fired point: every tick at or before it is
	// decided (fired, or dropped by the policy). Through equals the
	// window's After when nothing is due.
	Through time.Time
}

// MaxTicksPerPass bounds the ticks Due fires for one schedule: a catch-up
// of more fires them over several passes.
const MaxTicksPerPass = 100

// maxCounted bounds the missed ticks Due counts beyond every window (a
// schedule that fires each second and missed a year).
const maxCounted = 100_000

// Due decides the ticks of w to fire at now (the database's clock). A
// tick t is due when t+Jitter(t) <= now; it is on time when that jittered
// start (or the later start of the tick before it) was at most grace ago, and missed otherwise (no scheduler ran meanwhile). On
// time ticks fire. Missed ticks follow w.Catchup: none drops them all; one
// fires the latest of those within w.CatchupWindow of now (none when an on
// time tick fires too); all fires every one within the window, oldest
// first. At most MaxTicksPerPass ticks fire; Through is then the last of
// them, and the next call goes on from there.
func Due(w Window, now time.Time, grace time.Duration) Decision {
	// Ticks older than this are missed AND out of every window: never
	// enumerated (a schedule that fires each second and missed a year).
	floor := now.Add(-max(grace, w.CatchupWindow) - w.Jitter - time.Second)
	d, from := w.belowFloor(floor)
	missed, onTime, start := w.dueAfter(from, now, grace)
	inWindow := func(t time.Time) bool { return now.Sub(start[t]) <= w.CatchupWindow }
	fire := w.Catchup.pick(missed, onTime, inWindow)
	d.Fire = fire
	all := append(missed, onTime...)
	if len(all) > 0 {
		d.Through = all[len(all)-1]
	}
	if len(fire) > MaxTicksPerPass {
		d.Fire = fire[:MaxTicksPerPass]
		d.Through = d.Fire[MaxTicksPerPass-1]
	}
	for _, t := range missed {
		if !t.After(d.Through) && !slices.ContainsFunc(d.Fire, t.Equal) {
			d.Missed++
			if d.FirstMissed.IsZero() {
				d.FirstMissed = t
			}
			d.LastMissed = t
		}
	}
	return d
}

// belowFloor counts w's ticks in (After, floor]: missed and out of any
// window, so never fired, and counted up to maxCounted. It returns them
// as a Decision (Missed, FirstMissed, LastMissed, and Through the last of
// them, or After) and the point from which Due goes on enumerating.
func (w Window) belowFloor(floor time.Time) (Decision, time.Time) {
	from := w.After
	d := Decision{Through: w.After}
	if every, ok := w.Spec.sched.(cron.ConstantDelaySchedule); ok && from.Before(floor) {
		// "@every d" counts from the last-fired point: jump whole
		// periods, to stay on its grid.
		n := int(floor.Sub(from) / every.Delay)
		first := w.Spec.Next(from)
		d.Missed, from = n, from.Add(time.Duration(n)*every.Delay)
		if n > 0 {
			d.Through = from
			d.FirstMissed, d.LastMissed = first, from
		}
	} else if from.Before(floor) {
		for t := w.Spec.Next(from); !t.IsZero() && !t.After(floor) && d.Missed < maxCounted; t = w.Spec.Next(t) {
			d.Missed, d.Through = d.Missed+1, t
			if d.FirstMissed.IsZero() {
				d.FirstMissed = t
			}
			d.LastMissed = t
		}
		from = floor
	}
	return d, from
}

// dueAfter returns w's ticks after from that are due at now, oldest
// first, each missed or on time (its start at most grace ago), and each
// one's start: its scheduled time plus its jitter, and no earlier than the
// start of the tick before it (ticks fire in order: one held back by its
// jitter holds back the later ones). Lateness is measured from the start,
// never from the scheduled time.
func (w Window) dueAfter(from, now time.Time, grace time.Duration) (missed, onTime []time.Time, start map[time.Time]time.Time) {
	start = map[time.Time]time.Time{}
	var prev time.Time
	for t := w.Spec.Next(from); !t.IsZero() && !t.After(now); t = w.Spec.Next(t) {
		at := t.Add(Jitter(w.Name, t, w.Jitter))
		if at.After(now) {
			break // not due yet: neither it nor later ticks
		}
		at = maxTime(at, prev)
		start[t], prev = at, at
		if now.Sub(at) <= grace {
			onTime = append(onTime, t)
		} else {
			missed = append(missed, t)
		}
	}
	return missed, onTime, start
}

// pick returns the missed ticks that c fires, oldest first, then the on
// time ones: none drops every missed tick; one fires the latest of those
// inWindow, and only when no tick is on time; all fires each one inWindow.
func (c Catchup) pick(missed, onTime []time.Time, inWindow func(time.Time) bool) []time.Time {
	var fire []time.Time
	switch c {
	case CatchupAll:
		for _, t := range missed {
			if inWindow(t) {
				fire = append(fire, t)
			}
		}
	case CatchupOne:
		if len(onTime) == 0 {
			for i := len(missed) - 1; i >= 0; i-- {
				if inWindow(missed[i]) {
					fire = append(fire, missed[i])
					break
				}
			}
		}
	}
	return append(fire, onTime...)
}

// MinGap is the smallest gap between consecutive fire times among the
// next n+1 fire times after a fixed reference instant (2000-01-01 00:00 in
// the spec's zone: a shape check, no clock is read); 0 when the
// expression fires fewer than twice. A jitter at or above it would delay
// a tick past its successor's fire time (ticks fire in order).
func (s *Spec) MinGap(n int) time.Duration {
	times := s.NextN(time.Date(2000, 1, 1, 0, 0, 0, 0, s.loc), n+1)
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		if g := times[i].Sub(times[i-1]); gap == 0 || g < gap {
			gap = g
		}
	}
	return gap
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
