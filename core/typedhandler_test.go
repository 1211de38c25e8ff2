package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/flowforge/flowforge/core"
)

type chargeArgs struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Card    struct {
		Last4 string `json:"last4"`
	} `json:"card"`
}

type chargeResult struct {
	Charged int    `json:"charged"`
	Order   string `json:"order"`
}

func charge(_ context.Context, _ core.Task, a chargeArgs) (chargeResult, error) {
	if a.Amount < 0 {
		return chargeResult{}, errors.New("negative amount")
	}
	return chargeResult{Charged: a.Amount, Order: a.OrderID}, nil
}

// TestTypedHandlersDecodeArgsAndEncodeResults: the task's params (or the
// run's) decode into Args, the result is encoded; params that do not
// decode fail permanently with a message naming the field; the handler's
// own error comes back as it is, retryable.
func TestTypedHandlersDecodeArgsAndEncodeResults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		h         core.Handler
		params    string
		runParams string
		want      string // the result, when no error
		wantErr   string // the error's text
		permanent bool
	}{
		{name: "task params", h: core.TypedHandler(charge), params: `{"order_id": "o-1", "amount": 5}`, want: `{"charged":5,"order":"o-1"}`},
		{name: "no params decode as {}", h: core.TypedHandler(charge), params: ``, want: `{"charged":0,"order":""}`},
		{name: "null params decode as {}", h: core.TypedHandler(charge), params: `null`, want: `{"charged":0,"order":""}`},
		{name: "a wrong type names the field", h: core.TypedHandler(charge), params: `{"amount": "5"}`,
			wantErr: `params of task pay: field "amount": want int, got JSON string`, permanent: true},
		{name: "a nested field is named by its path", h: core.TypedHandler(charge), params: `{"card": {"last4": 1234}}`,
			wantErr: `params of task pay: field "card.last4": want string, got JSON number`, permanent: true},
		{name: "an unknown field of the task's params is refused", h: core.TypedHandler(charge), params: `{"amout": 5}`,
			wantErr: `params of task pay: unknown field "amout" (the handler's params have no such field)`, permanent: true},
		{name: "run params", h: core.TypedRunHandler(charge), runParams: `{"order_id": "o-2", "amount": 7}`, want: `{"charged":7,"order":"o-2"}`},
		{name: "an unknown run param is another task's", h: core.TypedRunHandler(charge), runParams: `{"amount": 7, "region": "eu"}`, want: `{"charged":7,"order":""}`},
		{name: "a wrong run param type names the field", h: core.TypedRunHandler(charge), runParams: `{"order_id": 9}`,
			wantErr: `run params of task pay: field "order_id": want string, got JSON number`, permanent: true},
		{name: "params that are not JSON", h: core.TypedHandler(charge), params: `{"amount":`,
			wantErr: `params of task pay: not JSON: unexpected EOF`, permanent: true},
		{name: "the handler's error is its own", h: core.TypedHandler(charge), params: `{"amount": -1}`,
			wantErr: `negative amount`, permanent: false},
		{name: "a result JSON cannot hold", h: core.TypedHandler(func(context.Context, core.Task, struct{}) (float64, error) { return math.NaN(), nil }),
			wantErr: `result of task pay: cannot encode float64 as JSON: json: unsupported value: NaN`, permanent: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			task := core.Task{TaskName: "pay", Params: json.RawMessage(c.params), RunParams: json.RawMessage(c.runParams)}
			got, err := c.h(context.Background(), task)
			if c.wantErr == "" {
				if err != nil || string(got) != c.want {
					t.Fatalf("got %s, %v; want %s", got, err, c.want)
				}
				return
			}
			if err == nil || err.Error() != c.wantErr {
				t.Fatalf("error %v, want %q", err, c.wantErr)
			}
			if core.IsPermanent(err) != c.permanent {
				t.Fatalf("permanent = %v, want %v", core.IsPermanent(err), c.permanent)
			}
		})
	}
}

// TestAParamsErrorKeepsEncodingJSONsError: a caller can read the field
// and types off the *json.UnmarshalTypeError it wraps.
func TestAParamsErrorKeepsEncodingJSONsError(t *testing.T) {
	t.Parallel()
	_, err := core.TypedHandler(charge)(context.Background(), core.Task{TaskName: "pay", Params: json.RawMessage(`{"amount": true}`)})
	var pe *core.ParamsError
	var te *json.UnmarshalTypeError
	if !errors.As(err, &pe) || !errors.As(err, &te) || te.Field != "amount" || pe.Task != "pay" || pe.Source != "params" {
		t.Fatalf("error %#v: want a *core.ParamsError of task pay wrapping json's error on field amount", err)
	}
}
