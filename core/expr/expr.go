package expr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Want is the type an expression must give.
type Want int

// The types an expression may be asked for.
const (
	// Bool: a `when:` condition.
	Bool Want = iota
	// List: a `for_each:` list.
	List
	// Time: a `sleep: {until:}` timestamp, a CEL timestamp or an RFC 3339
	// string.
	Time
	// Key: a `wait_for: {key:}` key, a string or an integer (written in
	// decimal).
	Key
	// Object: a child run's `workflow: {params:}`, a map with string keys.
	Object
)

// String names w as a workflow file's error says it.
func (w Want) String() string {
	switch w {
	case List:
		return "list"
	case Time:
		return "timestamp (or an RFC 3339 string)"
	case Key:
		return "string (or int)"
	case Object:
		return "map"
	}
	return "bool"
}

// CostLimit bounds one evaluation's cost (CEL's cost units, about one per
// operation and element visited): an expression that would exceed it, a
// comprehension over a huge list, fails with an error instead of holding
// the scheduler's pass.
const CostLimit = 10_000_000

// ErrCompile is matched (errors.Is) by every error of Compile.
var ErrCompile = errors.New("expression does not compile")

// ErrEval is matched by every error of an evaluation.
var ErrEval = errors.New("expression failed")

// Program is a compiled, checked expression, safe for concurrent use.
type Program struct {
	src  string
	want Want
	prg  cel.Program
	// constant: it reads neither params nor upstream.
	constant bool
}

// Source returns the expression as written.
func (p *Program) Source() string { return p.src }

// Constant reports whether the expression reads neither params nor
// upstream: its value is the same in every run, so `workflow apply` can
// evaluate it once and refuse one that fails (`timestamp("notatime")`)
// rather than fail each run's task.
func (p *Program) Constant() bool { return p.constant }

// Compile parses and type-checks src, which must give want (or a dynamic
// value, checked when it runs), with upstream the names of the tasks it may
// read (upstream.NAME). Errors wrap ErrCompile and say where:
// `1:14: undeclared reference to 'x'`, `1:1: upstream "merge" is not a task
// this one depends on (it may read: split)`, `1:1: gives int, want bool`.
func Compile(src string, want Want, upstream []string) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%w: the expression is empty", ErrCompile)
	}
	env, err := cel.NewEnv(
		cel.Variable("params", cel.DynType),
		cel.Variable("upstream", cel.MapType(cel.StringType, cel.DynType)),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: %s", ErrCompile, issueText(iss.Err()))
	}
	if err := checkUpstream(ast.NativeRep(), upstream); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	if err := checkType(ast.OutputType(), want); err != nil {
		return nil, fmt.Errorf("%w: 1:1: %w", ErrCompile, err)
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCompile, err)
	}
	constant := true
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == "params" || ref.Name == "upstream" {
			constant = false
		}
	}
	return &Program{src: src, want: want, prg: prg, constant: constant}, nil
}

// issueText is CEL's report of the issues, "ERROR: <input>:1:5: msg" and
// a caret line per issue, as "1:5: msg" with the caret lines kept.
func issueText(err error) string {
	s := strings.ReplaceAll(err.Error(), "ERROR: <input>:", "")
	return strings.TrimSpace(s)
}

// checkType refuses an expression whose checked type cannot be want.
func checkType(t *cel.Type, want Want) error {
	switch {
	case t.IsExactType(types.DynType):
		return nil
	case want == Bool && t.IsExactType(types.BoolType):
		return nil
	case want == List && t.Kind() == types.ListKind:
		return nil
	case want == Time && (t.IsExactType(types.TimestampType) || t.IsExactType(types.StringType)):
		return nil
	case want == Key && (t.IsExactType(types.StringType) || t.IsExactType(types.IntType) || t.IsExactType(types.UintType)):
		return nil
	case want == Object && t.Kind() == types.MapKind:
		return nil
	}
	return fmt.Errorf("gives %s, want %s", cel.FormatCELType(t), want)
}

// checkUpstream refuses a reference to upstream that names a task not in
// names, or that does not write the name out.
func checkUpstream(a *celast.AST, names []string) error {
	var bad error
	info := a.SourceInfo()
	at := func(id int64) string {
		loc := info.GetStartLocation(id)
		return fmt.Sprintf("%d:%d", loc.Line(), loc.Column()+1)
	}
	known := func(id int64, name string) {
		if bad == nil && !slices.Contains(names, name) {
			bad = fmt.Errorf("%s: upstream %q is not a task this one depends on (it may read: %s)", at(id), name, readable(names))
		}
	}
	celast.PreOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			if s := e.AsSelect(); isUpstream(s.Operand()) {
				known(e.ID(), s.FieldName())
			}
		case celast.CallKind:
			c := e.AsCall()
			if c.FunctionName() != "_[_]" || len(c.Args()) != 2 || !isUpstream(c.Args()[0]) {
				return
			}
			k := c.Args()[1]
			if k.Kind() != celast.LiteralKind || k.AsLiteral().Type() != types.StringType {
				if bad == nil {
					bad = fmt.Errorf("%s: upstream is indexed by a task name written out: upstream.NAME or upstream['NAME']", at(e.ID()))
				}
				return
			}
			known(e.ID(), k.AsLiteral().Value().(string))
		}
	}))
	return bad
}

// isUpstream reports whether e is the variable upstream.
func isUpstream(e celast.Expr) bool {
	return e.Kind() == celast.IdentKind && e.AsIdent() == "upstream"
}

// readable lists names for an error, "none" for none.
func readable(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Input is what an expression is evaluated over: the run's params (a JSON
// object) and the results of the tasks it may read, by name (JSON; a name
// absent from the map reads as null).
type Input struct {
	Params   json.RawMessage
	Upstream map[string]json.RawMessage
}

// eval evaluates p over in, bounded by ctx and CostLimit.
func (p *Program) eval(ctx context.Context, in Input) (ref.Val, error) {
	params, err := decode(in.Params, "params")
	if err != nil {
		return nil, p.fail(err)
	}
	if params == nil {
		params = map[string]any{}
	}
	up := make(map[string]any, len(in.Upstream))
	for name, raw := range in.Upstream {
		v, err := decode(raw, "upstream."+name)
		if err != nil {
			return nil, p.fail(err)
		}
		up[name] = v
	}
	out, _, err := p.prg.ContextEval(ctx, map[string]any{"params": params, "upstream": up})
	if err != nil {
		return nil, p.fail(err)
	}
	return out, nil
}

// fail is err as an evaluation error naming the expression.
func (p *Program) fail(err error) error {
	return fmt.Errorf("%w: %s: %w", ErrEval, p.src, err)
}

// Bool evaluates a Bool expression. A value other than a bool is an error
// (wrapping ErrEval, naming the expression).
func (p *Program) Bool(ctx context.Context, in Input) (bool, error) {
	out, err := p.eval(ctx, in)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, p.fail(fmt.Errorf("gives %s, want bool", out.Type().TypeName()))
	}
	return b, nil
}

// List evaluates a List expression and returns its elements as JSON, in
// order. A value other than a list is an error (wrapping ErrEval, naming
// the expression), and so is an element JSON cannot hold.
func (p *Program) List(ctx context.Context, in Input) ([]json.RawMessage, error) {
	out, err := p.eval(ctx, in)
	if err != nil {
		return nil, err
	}
	if out.Type() != types.ListType {
		return nil, p.fail(fmt.Errorf("gives %s, want list", out.Type().TypeName()))
	}
	native, err := out.ConvertToNative(reflect.TypeFor[*structpb.ListValue]())
	if err != nil {
		return nil, p.fail(fmt.Errorf("the list cannot be JSON: %w", err))
	}
	list := native.(*structpb.ListValue)
	items := make([]json.RawMessage, len(list.Values))
	for i, v := range list.Values {
		js, err := protojson.Marshal(v)
		if err != nil {
			return nil, p.fail(fmt.Errorf("element %d cannot be JSON: %w", i, err))
		}
		items[i] = compact(js)
	}
	return items, nil
}

// compact removes the insignificant spaces protojson may write.
func compact(js []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, js); err != nil {
		return js
	}
	return json.RawMessage(b.Bytes())
}

// Time evaluates a Time expression: a CEL timestamp, or a string in RFC
// 3339 (`"2026-12-24T18:00:00Z"`). Any other value is an error (wrapping
// ErrEval, naming the expression).
func (p *Program) Time(ctx context.Context, in Input) (time.Time, error) {
	out, err := p.eval(ctx, in)
	if err != nil {
		return time.Time{}, err
	}
	switch v := out.Value().(type) {
	case time.Time:
		return v, nil
	case string:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, p.fail(fmt.Errorf("%q is not an RFC 3339 timestamp", v))
		}
		return t, nil
	}
	return time.Time{}, p.fail(fmt.Errorf("gives %s, want timestamp", out.Type().TypeName()))
}

// Key evaluates a Key expression: a string as it is, an integer in
// decimal. Any other value (a double, a list, null) is an error (wrapping
// ErrEval, naming the expression): a key compared by equality must not
// depend on how a number is printed.
func (p *Program) Key(ctx context.Context, in Input) (string, error) {
	out, err := p.eval(ctx, in)
	if err != nil {
		return "", err
	}
	switch v := out.Value().(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return strconv.FormatInt(int64(v), 10), nil
		}
	}
	return "", p.fail(fmt.Errorf("gives %s, want string or int", out.Type().TypeName()))
}

// Object evaluates an Object expression and returns the map as a JSON
// object. Any other value is an error (wrapping ErrEval, naming the
// expression), and so is a map JSON cannot hold (a key that is not a
// string).
func (p *Program) Object(ctx context.Context, in Input) (json.RawMessage, error) {
	out, err := p.eval(ctx, in)
	if err != nil {
		return nil, err
	}
	if out.Type() != types.MapType {
		return nil, p.fail(fmt.Errorf("gives %s, want map", out.Type().TypeName()))
	}
	native, err := out.ConvertToNative(reflect.TypeFor[*structpb.Struct]())
	if err != nil {
		return nil, p.fail(fmt.Errorf("the map cannot be a JSON object: %w", err))
	}
	js, err := protojson.Marshal(native.(*structpb.Struct))
	if err != nil {
		return nil, p.fail(fmt.Errorf("the map cannot be a JSON object: %w", err))
	}
	return compact(js), nil
}
