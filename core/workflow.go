package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/template"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// MaxNameLength bounds workflow and task names (characters).
const MaxNameLength = 128

// MaxHandlerLength bounds a task's handler name, in bytes. The handler name
// is copied into every dispatch message of the task, so an unbounded one
// could make a message the broker refuses.
const MaxHandlerLength = 128

// MaxTasks bounds the number of tasks of one workflow.
const MaxTasks = 1000

// MaxIdempotencyTTL bounds a task's idempotency_ttl (ten years).
const MaxIdempotencyTTL = 10 * 365 * 24 * time.Hour

// MaxAttemptsLimit bounds retry.max_attempts.
const MaxAttemptsLimit = 1000

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ErrBadWorkflow is matched (errors.Is) by every workflow definition error.
var ErrBadWorkflow = errors.New("invalid workflow")

// Definition is a workflow as written in a workflow file (YAML or JSON) and
// stored in workflows.definition.
type Definition struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	FailFast    bool   `json:"fail_fast,omitempty"`
	// Defaults are merged into every task when the file is parsed (a
	// task's own fields win, field by field at the top level): the stored
	// tasks are the effective ones, and Defaults is kept for the record.
	Defaults *TaskDefaults `json:"defaults,omitempty"`
	// Concurrency bounds the open runs with the same key (run-level flow
	// control, see flow.go): nil means no bound.
	Concurrency *RunConcurrencySpec `json:"concurrency,omitempty"`
	Tasks       []TaskDef           `json:"tasks"`
}

// TaskDef is one task of a Definition.
type TaskDef struct {
	Name           string          `json:"name"`
	Handler        string          `json:"handler"`
	Params         json.RawMessage `json:"params,omitempty"`
	DependsOn      []string        `json:"depends_on,omitempty"`
	Retry          *RetrySpec      `json:"retry,omitempty"`
	Timeout        *Duration       `json:"timeout,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// IdempotencyTTL bounds how old a result recorded for the key this
	// task reuses: a result completed longer ago than this (database
	// clock) is not reused, the key is taken over and the handler runs
	// again. Nil means a recorded result is reused for ever. Only with
	// IdempotencyKey; positive, at most MaxIdempotencyTTL.
	IdempotencyTTL *Duration `json:"idempotency_ttl,omitempty"`
	// When is a CEL condition (core/expr) over params and upstream
	// results: false makes the task SKIPPED. "" means always.
	When string `json:"when,omitempty"`
	// TriggerRule says which outcomes of the upstream tasks let it run
	// (TriggerRule; "" is all_success). Only with DependsOn.
	TriggerRule string `json:"trigger_rule,omitempty"`
	// OnFailure: the task runs only when its run is failing, after the
	// failing task settled, and is SKIPPED when the run does not fail. It
	// takes no DependsOn and no task depends on it.
	OnFailure bool `json:"on_failure,omitempty"`
	// ForEach is a CEL expression giving a list: the task runs once per
	// element (see Kind). "" means once.
	ForEach string `json:"for_each,omitempty"`
	// MaxItems bounds ForEach's list (nil: MaxItemsDefault; 1 to
	// MaxItemsLimit); a longer list fails the task. Only with ForEach.
	MaxItems *int `json:"max_items,omitempty"`
	// Sleep makes the task a durable sleep (KindSleep): nil means none.
	Sleep *SleepSpec `json:"sleep,omitempty"`
	// WaitFor makes the task wait for an event (KindWait): nil means none.
	WaitFor *WaitSpec `json:"wait_for,omitempty"`
	// Workflow makes the task a child run of another workflow
	// (KindWorkflow): nil means none.
	Workflow *ChildSpec `json:"workflow,omitempty"`
	// Concurrency bounds the task runs with the same key that are
	// dispatched or running at once, across every worker (see flow.go):
	// nil means no bound.
	Concurrency *ConcurrencySpec `json:"concurrency,omitempty"`
	// RateLimit bounds the task runs with the same key that start in any
	// window of its period: nil means no bound.
	RateLimit *RateLimitSpec `json:"rate_limit,omitempty"`
	// Priority orders the task's runs among the waiters of their
	// concurrency key or rate limit: PriorityMin (1, lowest) to
	// PriorityMax (4); nil means PriorityDefault (2).
	Priority *int `json:"priority,omitempty"`
}

// RetrySpec is the retry block of a task; absent fields take the defaults of
// RetryPolicyDefault.
type RetrySpec struct {
	MaxAttempts    *int      `json:"max_attempts,omitempty"`
	InitialBackoff *Duration `json:"initial_backoff,omitempty"`
	MaxBackoff     *Duration `json:"max_backoff,omitempty"`
}

// Policy resolves the task's retry policy with defaults filled in.
func (t TaskDef) Policy() RetryPolicy {
	p := RetryPolicyDefault()
	if t.Retry == nil {
		return p
	}
	if t.Retry.MaxAttempts != nil {
		p.MaxAttempts = *t.Retry.MaxAttempts
	}
	if t.Retry.InitialBackoff != nil {
		p.InitialBackoff = time.Duration(*t.Retry.InitialBackoff)
		if p.MaxBackoff < p.InitialBackoff && t.Retry.MaxBackoff == nil {
			p.MaxBackoff = p.InitialBackoff
		}
	}
	if t.Retry.MaxBackoff != nil {
		p.MaxBackoff = time.Duration(*t.Retry.MaxBackoff)
		if t.Retry.InitialBackoff == nil && p.InitialBackoff > p.MaxBackoff {
			p.InitialBackoff = p.MaxBackoff
		}
	}
	return p
}

// IdempotencyTTLOrZero returns the task's idempotency_ttl, 0 meaning a
// recorded result is reused for ever.
func (t TaskDef) IdempotencyTTLOrZero() time.Duration {
	if t.IdempotencyTTL == nil {
		return 0
	}
	return time.Duration(*t.IdempotencyTTL)
}

// TimeoutOrZero returns the task's timeout, 0 meaning none.
func (t TaskDef) TimeoutOrZero() time.Duration {
	if t.Timeout == nil {
		return 0
	}
	return time.Duration(*t.Timeout)
}

// failingTask names the task of doc (a decoded workflow file) that does
// not decode as a TaskDef, and its field: `task "load": timeout: ` (or
// `tasks[2]: ` for a task without a name), so that a decoding error such
// as `timeout: 10` says where it is. It returns "" when every task decodes
// (the error is elsewhere in the file).
func failingTask(doc any) string {
	m, _ := doc.(map[string]any)
	tasks, _ := m["tasks"].([]any)
	for i, t := range tasks {
		where := fmt.Sprintf("tasks[%d]: ", i)
		fields, ok := t.(map[string]any)
		if !ok {
			if decodeStrict(t, &TaskDef{}) != nil {
				return where
			}
			continue
		}
		if n, ok := fields["name"].(string); ok && n != "" {
			where = fmt.Sprintf("task %q: ", n)
		}
		if decodeStrict(t, &TaskDef{}) == nil {
			continue
		}
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if decodeStrict(map[string]any{k: fields[k]}, &TaskDef{}) != nil {
				return where + k + ": "
			}
		}
		return where
	}
	return ""
}

// decodeStrict decodes v (JSON-shaped) into out, refusing unknown fields.
func decodeStrict(v any, out any) error {
	js, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	return d.Decode(out)
}

// ParseDefinition decodes a workflow file. YAML is accepted (JSON is YAML);
// unknown fields are an error naming the field, as are trailing documents.
// The result is validated (see Definition.Validate). Every error wraps
// ErrBadWorkflow.
func ParseDefinition(data []byte) (*Definition, error) {
	doc, err := decodeWorkflowFile(data)
	if err != nil {
		return nil, err
	}
	return definitionOf(doc)
}

// decodeWorkflowFile decodes a workflow file (YAML or JSON, one document)
// into its top-level mapping. Errors wrap ErrBadWorkflow.
func decodeWorkflowFile(data []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrBadWorkflow)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	doc, err := decodePlainNumbers(dec)
	if err != nil {
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%w: the file holds more than one YAML document", ErrBadWorkflow)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: want a mapping with name and tasks at the top level", ErrBadWorkflow)
	}
	// Every text of a definition (description, handler, when, keys,
	// params, a schedule's fields) is stored as PostgreSQL text or jsonb,
	// which refuse the NUL character: refused here, naming the field,
	// rather than as the database's error when the definition is stored.
	if field, found := nulField(jsonable(m).(map[string]any)); found {
		return nil, fmt.Errorf("%w: %s contains a NUL character (\\u0000), which PostgreSQL cannot store", ErrBadWorkflow, field)
	}
	return m, nil
}

// definitionOf decodes and validates the Definition of a workflow file's
// top-level mapping doc (see ParseDefinition). Errors wrap ErrBadWorkflow.
func definitionOf(doc map[string]any) (*Definition, error) {
	js, err := json.Marshal(jsonable(doc))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadWorkflow, err)
	}
	jd := json.NewDecoder(bytes.NewReader(js))
	jd.DisallowUnknownFields()
	var def Definition
	if err := jd.Decode(&def); err != nil {
		where, msg := decodeErrorText(failingPart(jsonable(doc)), err)
		return nil, fmt.Errorf("%w: %s%s", ErrBadWorkflow, where, msg)
	}
	def.applyDefaults()
	if err := def.Validate(); err != nil {
		return nil, err
	}
	return &def, nil
}

// jsonable converts YAML's decoded maps (which may have non-string keys)
// into values encoding/json accepts.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonable(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = jsonable(e)
		}
		return t
	}
	return v
}

// ValidateName checks a workflow or task name: [a-z0-9][a-z0-9._-]*, at most
// MaxNameLength characters. what names the thing in the error ("workflow").
func ValidateName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s name is missing", ErrBadWorkflow, what)
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("%w: %s name %q is longer than %d characters", ErrBadWorkflow, what, name, MaxNameLength)
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s name %q must match [a-z0-9][a-z0-9._-]*", ErrBadWorkflow, what, name)
	}
	return nil
}

// Validate checks the whole definition and returns the first problem,
// naming the offending workflow, task, dependency or field. Errors wrap
// ErrBadWorkflow.
func (d *Definition) Validate() error {
	if err := ValidateName("workflow", d.Name); err != nil {
		return err
	}
	if len(d.Tasks) == 0 {
		return fmt.Errorf("%w: workflow %q has no tasks", ErrBadWorkflow, d.Name)
	}
	if len(d.Tasks) > MaxTasks {
		return fmt.Errorf("%w: workflow %q has %d tasks, more than the limit of %d", ErrBadWorkflow, d.Name, len(d.Tasks), MaxTasks)
	}
	deps := make(map[string][]string, len(d.Tasks))
	for _, t := range d.Tasks {
		if err := ValidateName("task", t.Name); err != nil {
			return err
		}
		if _, dup := deps[t.Name]; dup {
			return fmt.Errorf("%w: duplicate task name %q", ErrBadWorkflow, t.Name)
		}
		deps[t.Name] = t.DependsOn
		if err := t.validate(); err != nil {
			return fmt.Errorf("%w: task %q: %v", ErrBadWorkflow, t.Name, err)
		}
	}
	if err := ValidateDAG(deps); err != nil {
		return fmt.Errorf("%w: %v", ErrBadWorkflow, err)
	}
	if err := d.Concurrency.validate(); err != nil {
		return fmt.Errorf("%w: concurrency: %v", ErrBadWorkflow, err)
	}
	return d.checkLanguage(deps)
}

func (t TaskDef) validate() error {
	if err := t.validateHeld(); err != nil {
		return err
	}
	if k := t.Kind(); strings.TrimSpace(t.Handler) == "" && (!k.Held() || k == KindForEach) {
		return errors.New("handler is missing")
	}
	if len(t.Handler) > MaxHandlerLength {
		return fmt.Errorf("handler name is %d bytes, longer than the limit of %d", len(t.Handler), MaxHandlerLength)
	}
	if len(t.Params) > 0 && string(t.Params) != "null" {
		if err := ValidateParams(t.Params); err != nil {
			return fmt.Errorf("params: %v", err)
		}
	}
	if err := checkParamTemplates(t); err != nil {
		return err
	}
	if err := t.validateLanguage(); err != nil {
		return err
	}
	if err := t.validateFlow(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, d := range t.DependsOn {
		if seen[d] {
			return fmt.Errorf("depends_on lists %q twice", d)
		}
		seen[d] = true
	}
	if t.Retry != nil && t.Retry.MaxAttempts != nil {
		if n := *t.Retry.MaxAttempts; n < 1 || n > MaxAttemptsLimit {
			return fmt.Errorf("retry.max_attempts must be between 1 and %d, got %d", MaxAttemptsLimit, n)
		}
	}
	if err := t.Policy().Validate(); err != nil {
		return fmt.Errorf("retry: %v", err)
	}
	if t.Timeout != nil && *t.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %s", time.Duration(*t.Timeout))
	}
	if t.IdempotencyTTL != nil {
		switch ttl := time.Duration(*t.IdempotencyTTL); {
		case t.IdempotencyKey == "":
			return errors.New("idempotency_ttl needs an idempotency_key: it bounds how old a result recorded for the key is reused")
		case ttl <= 0:
			return fmt.Errorf("idempotency_ttl must be positive, got %s", ttl)
		case ttl > MaxIdempotencyTTL:
			return fmt.Errorf("idempotency_ttl %s is longer than the limit of %s (leave it out to reuse a result for ever)", ttl, MaxIdempotencyTTL)
		case ttl < time.Millisecond:
			return fmt.Errorf("idempotency_ttl %s is shorter than a millisecond", ttl)
		}
	}
	if t.IdempotencyKey != "" {
		tmpl, err := parseKeyTemplate(t.IdempotencyKey)
		if err != nil {
			return fmt.Errorf("idempotency_key: %v", err)
		}
		// Render once with no params: a missing param is fine here (it is
		// checked at trigger), a field KeyData does not have is not.
		err = tmpl.Option("missingkey=zero").Execute(io.Discard, KeyData{Params: map[string]any{}, Workflow: "w", Task: t.Name})
		if err != nil && strings.Contains(err.Error(), "KeyData") {
			return fmt.Errorf("idempotency_key: %v (the template sees .Params.<name>, .Workflow and .Task)", err)
		}
		if err := t.checkItemUse("idempotency_key", tmpl); err != nil {
			return err
		}
	}
	return nil
}

// Deps returns the dependency map (task name -> names it depends on).
func (d *Definition) Deps() map[string][]string {
	deps := make(map[string][]string, len(d.Tasks))
	for _, t := range d.Tasks {
		deps[t.Name] = t.DependsOn
	}
	return deps
}

func parseKeyTemplate(s string) (*template.Template, error) {
	return parseTemplate("idempotency_key", s)
}

// KeyData is what an idempotency_key template sees: {{ .Params.date }},
// {{ .Workflow }}, {{ .Task }}, and in a for_each task {{ .Item }}, the
// element its task run was made for (decoded JSON: {{ .Item.file }} for
// an object's field).
type KeyData struct {
	Params   map[string]any
	Workflow string
	Task     string
	Item     any
}

// RenderIdempotencyKey expands a task's idempotency_key template over the
// run's params. An empty template yields "" (no key). A missing param is an
// error naming it; an empty result is an error too.
func RenderIdempotencyKey(tmpl string, data KeyData) (string, error) {
	if tmpl == "" {
		return "", nil
	}
	t, err := parseKeyTemplate(tmpl)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("render idempotency_key of task %q: %w", data.Task, err)
	}
	if strings.TrimSpace(buf.String()) == "" {
		return "", fmt.Errorf("idempotency_key of task %q renders empty", data.Task)
	}
	return buf.String(), nil
}

// MaxTaskKeyBytes bounds the part of a rendered task idempotency key that is
// stored verbatim (1 KiB); see StoredIdempotencyKey.
const MaxTaskKeyBytes = 1024

// StoredIdempotencyKey maps a rendered task idempotency key to the value that
// is stored in task_runs and idempotency_keys, compared by the key claim and
// sent by the http handler as its Idempotency-Key header. A key of at most
// MaxTaskKeyBytes bytes is itself. A longer key becomes its first
// MaxTaskKeyBytes bytes (cut on a rune boundary), then
// "… [N bytes, sha256 H]" with N the whole key's length in bytes and H the
// SHA-256 of the whole key in lowercase hex: at most MaxTaskKeyBytes+90
// bytes. Equal keys map to equal values and different keys to different
// values (a long form is always longer than MaxTaskKeyBytes, so it never
// equals a short key; two long forms differ in their hashes). It returns an
// error, and nothing may be stored, when the key contains a NUL character or
// invalid UTF-8: PostgreSQL's text cannot hold them, and replacing them
// would make different keys equal.
func StoredIdempotencyKey(key string) (string, error) {
	switch {
	case !utf8.ValidString(key):
		return "", errors.New("idempotency key is not valid UTF-8")
	case strings.ContainsRune(key, 0):
		return "", errors.New("idempotency key contains a NUL character")
	case strings.ContainsFunc(key, unicode.IsControl):
		// A key travels as an HTTP header (the http handler sends it), where
		// CR, LF and other controls are invalid: refused at trigger, not
		// retried at every attempt.
		return "", errors.New("idempotency key contains a control character (CR, LF, TAB or another)")
	case len(key) <= MaxTaskKeyBytes:
		return key, nil
	}
	cut := MaxTaskKeyBytes
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [%d bytes, sha256 %x]", key[:cut], len(key), sha256.Sum256([]byte(key))), nil
}
