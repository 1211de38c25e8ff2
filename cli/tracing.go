package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core/tracing"
)

// tracingShutdownTimeout bounds the flush of the spans not exported yet
// when a command or a daemon ends (a collector that does not answer).
const tracingShutdownTimeout = 5 * time.Second

// startTracing builds the tracer provider of this process from the
// OTEL_* environment (tracing.Setup; off unless OTEL_TRACES_EXPORTER says
// otherwise), its console exporter writing to console: a daemon's
// standard output, and a command's standard error, since a command's
// standard output is what scripts read (`ffctl run trigger` prints the
// run id there; a span line after it broke `RUN=$(ffctl run trigger ...)`
// and -o json). service is the default service.name. An unknown exporter
// is a usage error (exit 2) naming the variable and the accepted values;
// an exporter that cannot be built is a failure. Failed exports are
// logged on log. The caller defers
// stopTracing.
func startTracing(ctx context.Context, env *Env, service string, console io.Writer, log *slog.Logger) (*tracing.Provider, error) {
	p, err := tracing.Setup(ctx, service, console, env.env, log)
	switch {
	case errors.Is(err, tracing.ErrUnknownExporter):
		return nil, usageError("%v", err)
	case err != nil:
		return nil, failure(err)
	}
	return p, nil
}

// startCommandTracing is startTracing for a command (service.name
// "ffctl"): its console spans and its failed exports (on the --log-level
// logger) go to standard error, which scripts do not read.
func startCommandTracing(c *cli.Context, env *Env) (*tracing.Provider, error) {
	log, err := logger(c, env)
	if err != nil {
		return nil, err
	}
	return startTracing(c.Context, env, "ffctl", env.Stderr, log)
}

// stopTracing flushes and shuts p down, reporting a failed flush on
// env.Stderr (the command's own outcome stands).
func stopTracing(env *Env, p *tracing.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "ffctl: %v\n", err)
	}
}
