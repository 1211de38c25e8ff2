package cli

import (
	"context"
	"os"
	"os/signal"
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

// TestInterruptContextOffersTheSecondSignal: a command that asks for the
// second signal (the bulk trigger) gets a context that the first signal
// leaves alone and the second cancels, naming it. Asked of a context
// interruptContext did not make, the second context never ends. (That the
// second signal never finds its default action, which would end the
// process, is TestASecondSignalAbandonsTheBulkBatchInFlightAndSaysHowToCheck's:
// here the test listens too, so that a missing watcher fails the test
// rather than killing its binary.) Not parallel: see
// TestInterruptContextNamesTheSignal.
func TestInterruptContextOffersTheSecondSignal(t *testing.T) {
	net := make(chan os.Signal, 2)
	signal.Notify(net, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(net)
	ctx, release := interruptContext(context.Background())
	defer release()
	second := secondInterrupt(ctx)
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first SIGINT did not cancel the context")
	}
	if second.Err() != nil {
		t.Fatalf("the first signal cancelled the second signal's context: %v", context.Cause(second))
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the second signal did not cancel the second signal's context")
	}
	if ie := interrupted(second); ie == nil || ie.Signal != syscall.SIGTERM {
		t.Fatalf("second cause %v, want an *InterruptError for SIGTERM", context.Cause(second))
	}
	if ie := interrupted(ctx); ie == nil || ie.Signal != syscall.SIGINT {
		t.Fatalf("first cause %v, want an *InterruptError for SIGINT", context.Cause(ctx))
	}

	plain, cancel := context.WithCancel(context.Background())
	cancel()
	if err := secondInterrupt(plain).Err(); err != nil {
		t.Fatalf("the second signal's context of a plain context ended with it: %v", err)
	}
}
