package supervisor

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// watchStop is the two-stage stop of one Run: when ctx ends it logs the
// graceful stop, and when Config.Hard is closed after that, or
// Config.StopTimeout has passed since, it aborts the worker's in-flight
// handlers. It returns when done is closed (Run returning).
func (p *process) watchStop(ctx context.Context, done <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	limit := p.cfg.stopTimeout()
	// Started before the log line, so a watcher that sees the line never
	// waits longer than the limit for the abort.
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	cause := context.Cause(ctx)
	var se *SignalError
	if errors.As(cause, &se) {
		p.log.Info("daemon: stopping gracefully (signal again to abort in-flight tasks)", "signal", se.Signal.String(), "stop_timeout", limit.String())
	} else {
		p.log.Info("daemon: stopping gracefully (signal again to abort in-flight tasks)", "cause", cause.Error(), "stop_timeout", limit.String())
	}
	select {
	case <-p.cfg.Hard:
		p.log.Warn("daemon: second signal; aborting in-flight tasks")
	case <-timeout.C:
		p.log.Warn("daemon: stop timeout passed; aborting in-flight tasks (as on a second signal)", "stop_timeout", limit.String())
	case <-done:
		return
	}
	p.stopMu.Lock()
	p.aborted = true
	abort := p.abort
	p.stopMu.Unlock()
	if abort != nil {
		abort()
	}
}

// setAbort records the worker's Abort for the second stage, and calls it
// at once when that stage has come already.
func (p *process) setAbort(abort func()) {
	p.stopMu.Lock()
	p.abort = abort
	aborted := p.aborted
	p.stopMu.Unlock()
	if aborted {
		abort()
	}
}

// SignalError is the cause of the context SignalStop cancels: the signal
// that arrived.
type SignalError struct {
	Signal os.Signal
}

func (e *SignalError) Error() string { return "received " + e.Signal.String() }

// SecondSignalAfter is how long after the first stop signal a second one
// must come to abort in-flight tasks; one sooner is taken as the same
// signal delivered twice (to the process and to its group).
const SecondSignalAfter = 250 * time.Millisecond

// DefaultStopTimeout is the default of a daemon's --stop-timeout: how long
// after the first stop signal a daemon waits for its in-flight work before
// it stops as on the second signal. The systemd units under deploy/ set
// TimeoutStopSec above it, so systemd's SIGKILL never comes first.
const DefaultStopTimeout = 30 * time.Second

// SignalStop turns the process's signals into the two stages of a
// daemon's stop (Run's ctx and Config.Hard): the first of sig (SIGINT or
// SIGTERM when none is given) cancels ctx, parent's child, with a
// *SignalError cause; the second, when it comes SecondSignalAfter or later, closes hard. release stops listening,
// waits for the goroutine that counts the signals and cancels ctx; call it
// once Run has returned. From then on the signals take their default
// action again, unless someone else listens for them.
func SignalStop(parent context.Context, sig ...os.Signal) (ctx context.Context, hard <-chan struct{}, release func()) {
	if len(sig) == 0 {
		sig = []os.Signal{os.Interrupt, syscall.SIGTERM}
	}
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, sig...)
	hardC := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// A signal sent to the whole process group (coreutils timeout, a
		// terminal's ^C reaching both a wrapper and the daemon) arrives
		// twice within microseconds: the second stage counts only a
		// signal that comes SecondSignalAfter or later than the first was
		// read, which is noted before anything (the "stopping gracefully"
		// log) can tell a watcher that the first one arrived.
		var first time.Time
		select {
		case s := <-sigs:
			first = time.Now()
			cancel(&SignalError{Signal: s})
		case <-done:
			return
		}
		for {
			select {
			case <-sigs:
				if time.Since(first) < SecondSignalAfter {
					continue
				}
				close(hardC)
			case <-done:
			}
			return
		}
	})
	return ctx, hardC, sync.OnceFunc(func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		cancel(nil)
	})
}
