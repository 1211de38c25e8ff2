package cli_test

import (
	"strings"
	"testing"
)

func TestOutboxStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	empty := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout)
	for _, k := range []string{"pending", "oldest_pending_seconds", "published_last_minute", "failing"} {
		if v, ok := empty[k]; !ok || v != 0 {
			t.Fatalf("empty outbox: %s = %v (present %v)", k, v, ok)
		}
	}
	h.apply("name: fan\ntasks:\n  - {name: a, handler: noop}\n  - {name: b, handler: noop}\n")
	h.trigger("fan")
	// Publish one of the two root dispatches, as the publisher would.
	b, err := h.s.LockOutbox(h.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkPublished(h.ctx, []int64{b.Rows[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	st := decode[map[string]float64](t, h.must("outbox", "status", "-o", "json").stdout)
	if st["pending"] != 1 || st["published_last_minute"] != 1 || st["oldest_pending_seconds"] < 0 || st["failing"] != 0 {
		t.Fatalf("outbox status: %v", st)
	}
	out := h.must("outbox", "status").stdout
	if !strings.Contains(out, "pending                 1\n") || !strings.Contains(out, "published last minute   1\n") {
		t.Fatalf("outbox status table:\n%s", out)
	}
}
