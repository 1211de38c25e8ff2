package expr

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTimeKeyAndObjectExpressions(t *testing.T) {
	t.Parallel()
	in := Input{
		Params:   json.RawMessage(`{"order_id": 17, "name": "ORDER-17", "at": "2026-12-24T18:00:00Z", "region": "eu", "ratio": 1.5}`),
		Upstream: map[string]json.RawMessage{"merge": json.RawMessage(`{"total": 1200}`)},
	}
	ctx := context.Background()
	for _, tc := range []struct {
		src  string
		want Want
		out  string // the value, formatted; "" with err set
		err  string
	}{
		{"params.at", Time, "2026-12-24T18:00:00Z", ""},
		{"timestamp('2026-01-02T03:04:05Z') + duration('1h')", Time, "2026-01-02T04:04:05Z", ""},
		{"params.name", Time, "", `"ORDER-17" is not an RFC 3339 timestamp`},
		{"params.order_id", Time, "", "want timestamp"},
		{"params.order_id", Key, "17", ""},
		{"params.name", Key, "ORDER-17", ""},
		{"'k-' + string(upstream.merge.total)", Key, "k-1200", ""},
		{"params.ratio", Key, "", "want string or int"},
		{"{'order': params.order_id, 'region': params.region}", Object, `{"order":17,"region":"eu"}`, ""},
		{"params", Object, `{"at":"2026-12-24T18:00:00Z","name":"ORDER-17","order_id":17,"ratio":1.5,"region":"eu"}`, ""},
		{"params.name", Object, "", "want map"},
	} {
		t.Run(tc.src+"/"+tc.want.String(), func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tc.src, tc.want, []string{"merge"})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			var got string
			switch tc.want {
			case Time:
				var v time.Time
				v, err = p.Time(ctx, in)
				got = v.UTC().Format(time.RFC3339)
			case Key:
				got, err = p.Key(ctx, in)
			case Object:
				var v json.RawMessage
				v, err = p.Object(ctx, in)
				got = string(v)
			}
			if tc.err != "" {
				if !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.src) {
					t.Fatalf("= %q, %v; want an ErrEval naming %q and containing %q", got, err, tc.src, tc.err)
				}
				return
			}
			if err != nil || got != tc.out {
				t.Fatalf("= %q, %v; want %q", got, err, tc.out)
			}
		})
	}
}

func TestCompileRefusesTheWrongTypeForTimeKeyAndObject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src  string
		want Want
		err  string
	}{
		{"1 + 2", Time, "gives int, want timestamp"},
		{"[1]", Key, "gives list(int), want string (or int)"},
		{"'a'", Object, "gives string, want map"},
		{"true", Key, "gives bool, want string"},
	} {
		if _, err := Compile(tc.src, tc.want, nil); !errors.Is(err, ErrCompile) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Compile(%q, %s) = %v, want an ErrCompile containing %q", tc.src, tc.want, err, tc.err)
		}
	}
}

func TestConstantIsAnExpressionThatReadsNoVariable(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]bool{
		"timestamp('2026-01-02T03:04:05Z')": true,
		"'k-' + string(1)":                  true,
		"params.order_id":                   false,
		"upstream.merge.total > 1":          false,
		"[1, 2].exists(x, x == params.n)":   false,
		"[1, 2].exists(x, x == 2)":          true,
	} {
		var p *Program
		var err error
		for _, w := range []Want{Key, Bool, Time} {
			if p, err = Compile(src, w, []string{"merge"}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("Compile(%q): %v", src, err)
		}
		if p.Constant() != want {
			t.Errorf("Constant(%q) = %v, want %v", src, p.Constant(), want)
		}
	}
}
