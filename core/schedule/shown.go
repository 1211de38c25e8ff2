package schedule

import "time"

// ShownFireTimes is the next n fire times `ffctl schedule` (create, list,
// show) and the dashboard's Schedules screen show for a schedule read at
// now (the database's clock): NextFireTimes(w, now, n) while it is active,
// none while it is paused. A paused schedule fires no tick, and what a
// resume would fire depends on when it comes (a resume moves the
// last-fired point to its own now), so a time shown for it would be a time
// at which nothing happens, and a script reading `next_fire_at` would take
// it for one.
func ShownFireTimes(w Window, paused bool, now time.Time, n int) []time.Time {
	if paused {
		return nil
	}
	return NextFireTimes(w, now, n)
}
