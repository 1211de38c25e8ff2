package metrics

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestEveryCollectorOfMetricsIsRegistered: each collector field of
// Metrics is on its registry (registering it again is refused as already
// registered, or its descriptors taken), so that a counter the daemons add to is also exported. The
// skipped and expanded counters of the workflow language were once
// created and counted but never registered.
func TestEveryCollectorOfMetricsIsRegistered(t *testing.T) {
	t.Parallel()
	m := New()
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		c, ok := f.Interface().(prometheus.Collector)
		if !ok || f.IsNil() || v.Type().Field(i).Name == "Registry" {
			continue
		}
		// Refused: registered, itself or through a collector exporting its
		// descriptors (the outbox gauges' outboxCollector).
		if err := m.Registry.Register(c); err == nil {
			t.Errorf("Metrics.%s is not registered: Register accepted it", v.Type().Field(i).Name)
		}
	}
}
