package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// DeadLetterSource reads the number of messages in the dead-letter queue at
// scrape time (the worker's passive declare of it).
type DeadLetterSource func(ctx context.Context) (messages float64, err error)

// deadLetterCollector exports flowforge_dead_letter_queue_messages,
// refreshed from its source on every scrape; when the source fails (the
// broker is away) the gauge keeps its last value.
type deadLetterCollector struct {
	gauge prometheus.Gauge
	mu    sync.Mutex
	src   DeadLetterSource
}

func (c *deadLetterCollector) Describe(ch chan<- *prometheus.Desc) { c.gauge.Describe(ch) }

func (c *deadLetterCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), OutboxScrapeTimeout)
	n, err := src(ctx)
	cancel()
	if err == nil {
		c.gauge.Set(n)
	}
	c.gauge.Collect(ch)
}

// SetDeadLetterSource exports flowforge_dead_letter_queue_messages (the
// dead-letter queue's depth, read from src on every scrape, bounded by
// OutboxScrapeTimeout) from this process; a later call replaces src. Only
// processes that call it (the worker) export the gauge. Compare it with the
// max-length of the policy applied (ffctl broker policy): at the limit,
// every new dead letter drops the oldest.
func (m *Metrics) SetDeadLetterSource(src DeadLetterSource) {
	m.dlqOnce.Do(func() {
		m.dlq = &deadLetterCollector{gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flowforge_dead_letter_queue_messages",
			Help: "Messages in the dead-letter queue (the worker's passive declare at scrape time; bounded by the dead-letter policy's max-length).",
		})}
		m.Registry.MustRegister(m.dlq)
	})
	m.dlq.mu.Lock()
	m.dlq.src = src
	m.dlq.mu.Unlock()
}
