package metrics

import "sync"

// MaxLabelValuesDefault is how many distinct values of one label (workflow,
// handler) a process exports by default (--metrics-max-label-values).
const MaxLabelValuesDefault = 100

// MaxLabelValuesMax is the largest --metrics-max-label-values accepted:
// past it the series of one histogram (buckets × workflows × handlers)
// outgrow what a Prometheus scrape should carry.
const MaxLabelValuesMax = 10000

// OtherLabelValue is what a LabelBound reports for a value past its bound.
const OtherLabelValue = "other"

// LabelBound keeps the values of one label bounded: the first max distinct
// values it is asked about are kept as they are, for the life of the
// process; every later new value is reported as OtherLabelValue. A value
// kept stays itself however many others come after it. Safe for
// concurrent use.
type LabelBound struct {
	max  int
	mu   sync.RWMutex
	kept map[string]struct{}
}

// NewLabelBound returns a LabelBound keeping at most max values; max < 1
// means MaxLabelValuesDefault.
func NewLabelBound(max int) *LabelBound {
	if max < 1 {
		max = MaxLabelValuesDefault
	}
	return &LabelBound{max: max, kept: make(map[string]struct{}, min(max, 64))}
}

// Value returns v when v is one of the kept values or there is room to
// keep it (then it is kept), else OtherLabelValue.
func (b *LabelBound) Value(v string) string {
	b.mu.RLock()
	_, ok := b.kept[v]
	full := len(b.kept) >= b.max
	b.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return OtherLabelValue
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.kept[v]; ok {
		return v
	}
	if len(b.kept) >= b.max {
		return OtherLabelValue
	}
	b.kept[v] = struct{}{}
	return v
}
