package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/flowforge/flowforge/core/broker"
	"github.com/flowforge/flowforge/core/store"
	"github.com/flowforge/flowforge/daemon/backoff"
	"github.com/flowforge/flowforge/daemon/health"
	"github.com/flowforge/flowforge/daemon/metrics"
)

// openStoreRetrying connects (with opt, whose Logger it logs to) with backoff until the database answers or ctx
// ends (then it returns ctx's error); a schema that is not this binary's
// (store.ErrSchemaOutdated, store.ErrSchemaTooNew) and a refused login
// (store.IsLoginRefused: a wrong password, an unknown role or database)
// are returned at once, with the server's reason.
func openStoreRetrying(ctx context.Context, url string, opt store.Options) (*store.Store, error) {
	var bo backoff.Backoff
	log := opt.Logger
	for {
		s, err := store.Open(ctx, url, opt)
		if err == nil {
			if err = s.CheckSchema(ctx); err == nil {
				if bo.Reset() {
					log.Info("daemon: recovered", "dependency", "postgres")
				}
				return s, nil
			}
			s.Close()
			if errors.Is(err, store.ErrSchemaOutdated) || errors.Is(err, store.ErrSchemaTooNew) {
				return nil, err
			}
		}
		if store.IsLoginRefused(err) {
			return nil, fmt.Errorf("the database refused the login (check the user, password and database of --database-url; retrying would not help): %w", err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := bo.Fail()
		log.Error("daemon: database not available; retrying", "error", err, "retry_in", d.String())
		if backoff.Sleep(ctx, d) != nil {
			return nil, ctx.Err()
		}
	}
}

// checkBrokerLogin returns broker.CheckLogin's refusal for the roles that
// use the broker: a wrong user, password or vhost ends the process at
// start instead of being retried as an outage (a broker that does not
// answer is the loops' to retry, as before).
func (p *process) checkBrokerLogin(ctx context.Context) error {
	if !p.cfg.Role.usesBroker() {
		return nil
	}
	return broker.CheckLogin(ctx, p.cfg.Broker)
}

// watchDependencies runs every readiness check each DependencyWatchInterval
// until ctx ends. It sets flowforge_dependency_up, logs "daemon: dependency
// lost" when a dependency that answered stops answering and "daemon:
// dependency recovered" when it answers again, and counts the recovery in
// flowforge_reconnects_total for the dependencies in countReconnects (those
// no loop of this process counts itself).
func watchDependencies(ctx context.Context, checks map[string]health.Check, countReconnects []string, m *metrics.Metrics, log *slog.Logger) {
	w := dependencyWatch{down: map[string]time.Time{}, everUp: map[string]bool{}, countReconnects: countReconnects, m: m, log: log}
	t := time.NewTicker(DependencyWatchInterval)
	defer t.Stop()
	for {
		for name, check := range checks {
			cctx, cancel := context.WithTimeout(ctx, health.CheckTimeout)
			err := check(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			w.observe(name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dependencyWatch is the state of watchDependencies.
type dependencyWatch struct {
	down            map[string]time.Time // since when each failing check fails
	everUp          map[string]bool      // a dependency not yet up at start is "not ready yet", not "lost"
	countReconnects []string
	m               *metrics.Metrics
	log             *slog.Logger
}

// observe records one result of the check name.
func (w *dependencyWatch) observe(name string, err error) {
	dep := name
	if name == "rabbitmq_consumer" {
		dep = "rabbitmq"
	}
	since, wasDown := w.down[name]
	switch {
	case err != nil && !wasDown:
		w.down[name] = time.Now()
		w.m.DependencyUp.WithLabelValues(name).Set(0)
		if w.everUp[name] {
			w.log.Warn("daemon: dependency lost", "dependency", name, "error", err)
		} else {
			w.log.Debug("daemon: dependency not ready yet", "dependency", name, "error", err)
		}
	case err == nil && wasDown:
		delete(w.down, name)
		w.m.DependencyUp.WithLabelValues(name).Set(1)
		if !w.everUp[name] {
			w.everUp[name] = true
			break
		}
		if slices.Contains(w.countReconnects, dep) {
			w.m.Reconnects.WithLabelValues(dep).Inc()
		}
		w.log.Info("daemon: dependency recovered", "dependency", name, "down_for", time.Since(since).Round(time.Millisecond).String())
	case err == nil:
		w.everUp[name] = true
		w.m.DependencyUp.WithLabelValues(name).Set(1)
	}
}
