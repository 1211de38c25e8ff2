package cli

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestInterruptContextNamesTheSignal: the first SIGINT or SIGTERM cancels
// the commands' context with an *InterruptError naming it, so a wait exits
// 130 or 143; release then hands the signals back. Not parallel: the
// signal goes to the whole test process, and the in-process daemons of
// parallel tests would stop on it.
func TestInterruptContextNamesTheSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, release := interruptContext(context.Background())
			defer release()
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not cancel the context", sig)
			}
			ie := interrupted(ctx)
			if ie == nil || ie.Signal != sig || ie.ExitCode() != 128+int(sig) {
				t.Fatalf("cause %v, want an *InterruptError for %s (exit %d)", context.Cause(ctx), sig, 128+int(sig))
			}
		})
	}
	// Without a signal, release ends the context with no interrupt.
	ctx, release := interruptContext(context.Background())
	release()
	if ctx.Err() == nil || interrupted(ctx) != nil {
		t.Fatalf("after release: %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}
