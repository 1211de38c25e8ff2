package cli_test

import (
	"strings"
	"testing"
)

// TestAParamThatIsNotUTF8IsRefused: --param values are refused when they
// are not UTF-8, as --params-file is, so two different byte strings can
// never be stored as the same replacement character (and then share an
// idempotency key or a run-level key).
func TestAParamThatIsNotUTF8IsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.apply("name: utf\ntasks:\n  - {name: a, handler: noop}\n")
	for _, v := range []string{"k=X\xff", "k=X\xfe", "k\xff=v"} {
		before := h.snapshot()
		expect(t, h.ff("run", "trigger", "utf", "--param", v), 2, "not valid UTF-8")
		h.assertUnchanged(before)
	}
}

// TestBrokerPolicyPrintsACurlLineSafeToPaste: a vhost with shell
// metacharacters reaches the printed curl command quoted, so pasting it
// expands nothing and runs nothing in the background.
func TestBrokerPolicyPrintsACurlLineSafeToPaste(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	out := h.must("broker", "policy", "--amqp-url", "amqp://guest:guest@127.0.0.1:5672/prod%24HOME%26echo").stdout
	var curl string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "curl ") {
			curl = line
		}
	}
	if !strings.Contains(curl, "'http://HOST:15672/api/policies/prod$HOME&echo/") {
		t.Fatalf("the URL is not single-quoted:\n%s", curl)
	}
}
