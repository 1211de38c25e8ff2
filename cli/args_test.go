package cli

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core"
)

func TestInterspersedMovesFlagsWhereUrfaveLooksForThem(t *testing.T) {
	t.Parallel()
	app := NewApp(&Env{Registry: core.NewRegistry(), Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	cases := []struct {
		name string
		in   string
		want string
	}{
		{"leaf flags after a positional", "ffctl run trigger wf --wait --param a=b", "ffctl run trigger --wait --param a=b -- wf"},
		{"global flag after the command", "ffctl daemon all --queue q --concurrency 2", "ffctl --queue q daemon all --concurrency 2"},
		{"global flag with = after a positional", "ffctl run show ID --database-url=postgres://x -o json", "ffctl --database-url=postgres://x run show -o json -- ID"},
		{"global flag between command names", "ffctl run --queue q list", "ffctl --queue q run list"},
		{"global flag already first", "ffctl --queue q daemon worker", "ffctl --queue q daemon worker"},
		{"a command's own --version takes a value", "ffctl run trigger wf --version 2", "ffctl run trigger --version 2 -- wf"},
		{"double dash ends flags", "ffctl run show -- --odd", "ffctl run show -- --odd"},
		{"help after a positional drops the positional", "ffctl run show ID --help", "ffctl run show --help"},
		{"-h after a positional and a flag", "ffctl run trigger wf --param a=b -h", "ffctl run trigger --param a=b -h"},
		{"a flag's value that reads --help is no help flag", "ffctl dead requeue ID --reason --help", "ffctl dead requeue --reason --help -- ID"},
		{"--help after a double dash is an argument", "ffctl run show -- --help", "ffctl run show -- --help"},
		{"a flag missing its value is left to the parser", "ffctl --queue", "ffctl --queue"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(interspersed(app, strings.Fields(c.in)), " ")
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("interspersed(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
