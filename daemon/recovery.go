package daemon

import (
	"log/slog"

	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// Recovery tracks one loop's consecutive failures against one dependency:
// the embedded Backoff paces the retries, and the first success after
// failures counts a reconnect (flowforge_reconnects_total{dependency}) and
// logs "<component>: recovered". One per loop and dependency; not safe for
// concurrent use.
type Recovery struct {
	Component  string // "scheduler", "publisher", "worker"
	Dependency string // "postgres" or "rabbitmq"
	Log        *slog.Logger
	Metrics    *metrics.Metrics
	backoff.Backoff
}

// Succeeded records a success; after failures it counts and logs the
// recovery.
func (r *Recovery) Succeeded() {
	if r.Reset() {
		r.Metrics.Reconnects.WithLabelValues(r.Dependency).Inc()
		r.Log.Info(r.Component+": recovered", "dependency", r.Dependency)
	}
}
