package failpoint

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// EnvVar is the environment variable the cli reads failpoints from.
const EnvVar = "FLOWFORGE_FAILPOINTS"

// ExitCode is the status a process exits with when an exit failpoint fires.
const ExitCode = 3

// Name identifies one failpoint.
type Name string

// The known failpoints (see the package documentation).
const (
	PublisherDiscardConfirms  Name = "publisher.discard-confirms"
	PublisherExitAfterConfirm Name = "publisher.exit-after-confirm"
	// PublisherSigtermAfterConfirm: see SignalIf.
	PublisherSigtermAfterConfirm Name = "publisher.sigterm-after-confirm"
	// PublisherStreamExitAfterConfirm: see the package documentation.
	PublisherStreamExitAfterConfirm Name = "publisher.stream-exit-after-confirm"
	// WorkerExitBeforeFinishBatch: see the package documentation.
	WorkerExitBeforeFinishBatch Name = "worker.exit-before-finish-batch"
	// SchedulerExitMidTick: see the package documentation.
	SchedulerExitMidTick Name = "scheduler.exit-mid-tick"
	// SchedulerExitMidExpansion: see the package documentation.
	SchedulerExitMidExpansion Name = "scheduler.exit-mid-expansion"
	// SchedulerExitMidChildStart: see the package documentation.
	SchedulerExitMidChildStart Name = "scheduler.exit-mid-child-start"
)

var known = []Name{PublisherDiscardConfirms, PublisherExitAfterConfirm, PublisherSigtermAfterConfirm, PublisherStreamExitAfterConfirm, WorkerExitBeforeFinishBatch,
	SchedulerExitMidTick, SchedulerExitMidExpansion, SchedulerExitMidChildStart}

// Failpoints is a set of armed failpoints, each with the number of times it
// will still fire. A nil *Failpoints is valid and never fires. It is safe
// for concurrent use.
type Failpoints struct {
	remaining map[Name]*atomic.Int64
}

// Parse parses a failpoint list ("name=count,name"). An empty or blank
// spec returns nil (no failpoint armed). An unknown name, a malformed or
// non-positive count, or a name given twice is an error.
func Parse(spec string) (*Failpoints, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, nil
	}
	f := &Failpoints{remaining: map[Name]*atomic.Int64{}}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, hasCount := strings.Cut(item, "=")
		n := int64(1)
		if hasCount {
			v, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("failpoint %q: count must be a positive integer", item)
			}
			n = v
		}
		nm := Name(strings.TrimSpace(name))
		if !isKnown(nm) {
			return nil, fmt.Errorf("unknown failpoint %q (known: %s)", nm, knownList())
		}
		if _, dup := f.remaining[nm]; dup {
			return nil, fmt.Errorf("failpoint %q given twice", nm)
		}
		c := &atomic.Int64{}
		c.Store(n)
		f.remaining[nm] = c
	}
	if len(f.remaining) == 0 {
		return nil, nil
	}
	return f, nil
}

func isKnown(n Name) bool {
	for _, k := range known {
		if k == n {
			return true
		}
	}
	return false
}

func knownList() string {
	s := make([]string, len(known))
	for i, k := range known {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Fire reports whether failpoint name fires now, consuming one of its
// remaining counts. A nil receiver never fires.
func (f *Failpoints) Fire(name Name) bool {
	if f == nil {
		return false
	}
	c, ok := f.remaining[name]
	if !ok {
		return false
	}
	for {
		n := c.Load()
		if n <= 0 {
			return false
		}
		if c.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// ExitIf ends the process with ExitCode when failpoint name fires. It is
// the hook of the exit-after-* failpoints: no deferred function runs, no
// transaction commits, as if the process had been killed at that point.
func (f *Failpoints) ExitIf(name Name) {
	if f.Fire(name) {
		fmt.Fprintf(os.Stderr, "failpoint %s fired: exiting with status %d\n", name, ExitCode)
		os.Exit(ExitCode)
	}
}

// SignalIf sends SIGTERM to this process when failpoint name fires, and
// returns once ctx (the daemon's context, which the signal cancels) has
// ended: the caller then runs exactly as after a shutdown signal that
// arrived at that point. It is the hook of the sigterm-after-* failpoints.
func (f *Failpoints) SignalIf(ctx context.Context, name Name) {
	if !f.Fire(name) {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s fired: sending SIGTERM to this process\n", name)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		fmt.Fprintf(os.Stderr, "failpoint %s: %v\n", name, err)
		return
	}
	<-ctx.Done()
}

// String lists the armed failpoints with their remaining counts, sorted;
// "" for nil.
func (f *Failpoints) String() string {
	if f == nil {
		return ""
	}
	parts := make([]string, 0, len(f.remaining))
	for n, c := range f.remaining {
		parts = append(parts, fmt.Sprintf("%s=%d", n, c.Load()))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
