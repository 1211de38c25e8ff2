package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// BatchSizeDefault is how many runs of a --runs-file one transaction
// creates unless --batch-size says otherwise (fewer for a workflow of many
// tasks: see store.TriggerManyBatch).
const BatchSizeDefault = 500

// batchTimeout bounds one batch's statement. A batch runs on a context
// that a signal does not cancel: an interrupt takes effect between
// batches, so every batch either committed or never started, unless a
// second signal abandons the batch in flight, whose outcome is then
// reported unknown with both resume points.
const batchTimeout = 2 * time.Minute

// bulkExclusive are the flags that --runs-file excludes: each line is a
// run's whole params, and a batch neither waits nor de-duplicates.
var bulkExclusive = []string{"param", "params-file", "idempotency-key", "wait", "timeout"}

// runsLine is one run of a --runs-file: its params and its 1-based line
// number.
type runsLine struct {
	line   int
	params json.RawMessage
}

// bulkRun is one created run in -o json output.
type bulkRun struct {
	Line  int       `json:"line"`
	RunID uuid.UUID `json:"run_id"`
}

// bulkJSON is the -o json output of a bulk trigger.
type bulkJSON struct {
	Workflow string    `json:"workflow"`
	Created  int       `json:"created"`
	Complete bool      `json:"complete"`
	Runs     []bulkRun `json:"runs"`
	// ResumeFromLine is the --from-line that goes on where an interrupted
	// or failed trigger stopped (0 when Complete).
	ResumeFromLine int `json:"resume_from_line,omitempty"`
}

// runTriggerMany is `ffctl run trigger NAME --runs-file F`: every line of
// F is validated first (a bad one is a usage error naming it, and nothing
// is written), then the runs are created --batch-size at a time, one
// transaction per batch, each batch's run ids printed once it committed
// (one per line; -o json prints one object at the end). A signal stops it
// between batches: the committed batches stay, and the message says how
// many runs were created and the --from-line that resumes. A second signal
// abandons the batch in flight and says how to check whether its runs
// exist.
func runTriggerMany(c *cli.Context, env *Env, name, format string) error {
	for _, f := range bulkExclusive {
		if c.IsSet(f) {
			return usageError("--runs-file and --%s cannot be combined: each line of the file is one run's whole params, and a bulk trigger neither waits nor takes idempotency keys", f)
		}
	}
	size := c.Int("batch-size")
	if size < 1 || size > store.TriggerManyMax {
		return usageError("--batch-size %d: want 1 to %d", size, store.TriggerManyMax)
	}
	from := c.Int("from-line")
	if from < 1 {
		return usageError("--from-line %d: lines are numbered from 1", from)
	}
	version, err := versionFlag(c)
	if err != nil {
		return err
	}
	priority, err := priorityFlag(c)
	if err != nil {
		return err
	}
	path := c.String("runs-file")
	if path == "" {
		return usageError("--runs-file is empty: give a file, or - for standard input")
	}
	lines, err := readRunsFile(env, path, from)
	if err != nil {
		return err
	}
	s, err := openStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	params := make([]json.RawMessage, len(lines))
	for i, l := range lines {
		params[i] = l.params
	}
	// Every line against the definition too (its tasks' idempotency keys),
	// before the first batch; all batches then create runs of this version.
	wf, err := s.CheckRuns(c.Context, name, version, params)
	var bad *store.BadRunError
	switch {
	case errors.As(err, &bad):
		return usageError("--runs-file %s line %d: %v (nothing was triggered)", path, lines[bad.Index].line, bad.Err)
	case err != nil:
		return failure(err)
	}
	b := bulk{env: env, s: s, name: name, version: wf.Version, json: format == "json", actor: actor(), priority: priority, lastLine: lines[len(lines)-1].line}
	prior, err := s.ListRuns(c.Context, store.RunFilter{Workflow: name, Limit: 1})
	if err != nil {
		return failure(err)
	}
	if len(prior) == 1 {
		b.prior = &prior[0]
	}
	// A second signal reaches the batch in flight rather than the
	// default action (which Main hands the signals back to after the
	// first, and which a shell's background job ignores).
	abandon := secondInterrupt(c.Context)
	return b.trigger(c.Context, abandon, lines, store.TriggerManyBatch(size, len(wf.Definition.Tasks)))
}

// readRunsFile reads path ("-": standard input) and returns its runs from
// line from on: one line each, blank lines skipped (store.CheckRuns checks
// them). A line longer than core.MaxParamsBytes, or a file with no run, is
// a usage error naming the line and the reason.
func readRunsFile(env *Env, path string, from int) ([]runsLine, error) {
	r, closeInput, err := openInput(env, path)
	if err != nil {
		return nil, usageError("--runs-file: cannot read %s: %v", path, err)
	}
	defer closeInput()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), core.MaxParamsBytes+2) // a line at the limit, its \r\n
	var out []runsLine
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte(utf8BOM))
		}
		if n < from || len(line) == 0 {
			continue
		}
		// Checked by store.CheckRuns, with the workflow's keys.
		out = append(out, runsLine{line: n, params: json.RawMessage(bytes.Clone(line))})
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return nil, usageError("--runs-file %s line %d: %v: longer than the limit of %d bytes (nothing was triggered)", path, n+1, core.ErrBadParams, core.MaxParamsBytes)
	case err != nil:
		return nil, usageError("--runs-file: cannot read %s: %v", path, err)
	}
	if len(out) == 0 {
		if from > 1 {
			return nil, usageError("--runs-file %s has no run from line %d on (it has %d lines; nothing was triggered)", path, from, n)
		}
		return nil, usageError("--runs-file %s has no run: want one JSON params object per line (nothing was triggered)", path)
	}
	return out, nil
}

// bulk is one bulk trigger in progress.
type bulk struct {
	env     *Env
	s       *store.Store
	name    string
	version int
	json    bool
	actor   string
	// priority overrides every task's priority (--priority; 0: their own).
	priority int
	created  []bulkRun
	// prior is the workflow's newest run before this trigger (nil: none),
	// and lastLine the file's last line with a run: what a batch of
	// unknown outcome is checked and resumed against.
	prior    *store.Run
	lastLine int
}

// trigger creates lines' runs size at a time and reports them. The first
// signal cancels ctx, so the batch in flight ends and no other starts; the
// second cancels abandon, which abandons the batch in flight (see
// runBatch).
func (b *bulk) trigger(ctx, abandon context.Context, lines []runsLine, size int) error {
	for start := 0; start < len(lines); start += size {
		if ctx.Err() != nil {
			return b.stopped(lines[start].line, nil)
		}
		batch := lines[start:min(start+size, len(lines))]
		ids, err := b.runBatch(ctx, abandon, batch)
		if err != nil {
			return b.stopped(batch[0].line, b.batchError(batch, err))
		}
		for i, id := range ids {
			b.created = append(b.created, bulkRun{Line: batch[i].line, RunID: id})
			if !b.json {
				fmt.Fprintln(b.env.Stdout, id)
			}
		}
	}
	if b.json {
		return writeJSON(b.env.Stdout, bulkJSON{Workflow: b.name, Created: len(b.created), Complete: true, Runs: b.runs()})
	}
	return nil
}

// runBatch creates batch's runs in one statement, on a context that the
// interrupt (ctx's end) does not cancel, and returns their ids in line
// order. abandon's end (the second signal) cancels the statement's
// context: pgx drops the connection at once, and the process can exit;
// unless the statement had committed just before, the error then says that
// the batch's runs may or may not exist (store.ErrCommitOutcomeUnknown),
// which batchError turns into the resume points.
func (b *bulk) runBatch(ctx, abandon context.Context, batch []runsLine) ([]uuid.UUID, error) {
	params := make([]json.RawMessage, len(batch))
	for i, l := range batch {
		params[i] = l.params
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	unabandon := context.AfterFunc(abandon, cancel)
	defer unabandon()
	unnote := b.noteInterrupt(ctx, batch)
	defer unnote()
	ids, err := b.s.TriggerMany(bctx, store.TriggerManyRequest{Workflow: b.name, Version: b.version, Params: params, Actor: b.actor, Priority: b.priority})
	if err != nil && abandon.Err() != nil && errors.Is(err, store.ErrCommitOutcomeUnknown) {
		err = errAbandoned{}
	}
	return ids, err
}

// errAbandoned is a batch's error once a second signal cancelled its
// statement: whether it committed is unknown (it is a
// store.ErrCommitOutcomeUnknown), though the database was not at fault.
type errAbandoned struct{}

func (errAbandoned) Error() string {
	return "abandoned by a second signal before its outcome was known"
}

func (errAbandoned) Is(target error) bool { return target == store.ErrCommitOutcomeUnknown }

// noteInterrupt arranges that an interrupt arriving while batch is in
// flight says at once, on standard error, that ffctl stops once the batch
// has ended (a batch of 500 runs may take seconds, and a silent ctrl-C
// looks ignored). The returned function undoes that; once it has returned,
// the note has been written in full or not at all, so nothing writes to
// standard error beside the caller.
func (b *bulk) noteInterrupt(ctx context.Context, batch []runsLine) func() {
	written := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(written)
		fmt.Fprintf(b.env.Stderr, "interrupted: stopping once the batch in flight (lines %d to %d) has ended; "+
			"a second ctrl-C abandons it and says how to check whether its runs were created\n",
			batch[0].line, batch[len(batch)-1].line)
	})
	return func() {
		if !stop() {
			<-written
		}
	}
}

// batchError says what a failed batch (its lines) means for its runs.
func (b *bulk) batchError(batch []runsLine, err error) error {
	first, last := batch[0].line, batch[len(batch)-1].line
	var bad *store.BadRunError
	switch {
	case errors.As(err, &bad):
		return usageError("--runs-file line %d: %v", batch[bad.Index].line, bad.Err)
	case errors.Is(err, core.ErrBadParams):
		return usageError("%v", err)
	case errors.Is(err, store.ErrCommitOutcomeUnknown):
		// The batch is one statement: its runs exist all or none.
		n := len(batch)
		check := fmt.Sprintf("if `ffctl run list --workflow %s --limit %d` lists %d runs ", b.name, n, n)
		switch {
		case len(b.created) > 0:
			check += "newer than the runs already printed"
		case b.prior != nil:
			// Nothing printed to compare with: the newest run before
			// this trigger (a trial followed the advice to a lost batch).
			check += fmt.Sprintf("newer than run %s (created %s, the workflow's newest before this trigger)",
				b.prior.ID, b.prior.CreatedAt.UTC().Format(time.RFC3339Nano))
		default:
			check += "(the workflow had none before this trigger)"
		}
		then := fmt.Sprintf("resume with --from-line %d", last+1)
		if last >= b.lastLine {
			then = "every line was triggered"
		}
		return failure(fmt.Errorf("lines %d to %d: %w: the %d runs of these lines may have been created (all or none): %s, %s, "+
			"otherwise resume with --from-line %d", first, last, err, n, check, then, first))
	}
	if errors.Is(err, store.ErrWorkflowPaused) {
		// Its message says no run was created and how the pause ends.
		return failure(fmt.Errorf("lines %d to %d: %w", first, last, err))
	}
	return failure(fmt.Errorf("lines %d to %d: %w (their runs were not created)", first, last, err))
}

// stopped reports a bulk trigger that stopped before line next: because of
// err, or (err nil) an interrupt. What was created is printed and the
// message says how many runs there are and where to resume.
func (b *bulk) stopped(next int, err error) error {
	if b.json {
		if werr := writeJSON(b.env.Stdout, bulkJSON{Workflow: b.name, Created: len(b.created), Runs: b.runs(), ResumeFromLine: next}); werr != nil {
			return werr
		}
	}
	say := fmt.Sprintf("%d runs created (by the lines before line %d); resume with --from-line %d", len(b.created), next, next)
	if errors.Is(err, store.ErrWorkflowPaused) {
		say = fmt.Sprintf("%d runs created (by the lines before line %d); once the pause ends, resume with --from-line %d", len(b.created), next, next)
	}
	if errors.Is(err, store.ErrCommitOutcomeUnknown) {
		// The batch's error says where to resume: after it if its runs
		// exist, at it otherwise.
		say = fmt.Sprintf("%d runs created for certain (by the lines before line %d)", len(b.created), next)
		if len(b.created) == 0 {
			say = "no run created for certain by this trigger"
		}
	}
	if err == nil {
		// A failure: ffctl exits 128+signal when a signal cut it short.
		return failure(errors.New("interrupted; " + say))
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return &ExitError{Code: ee.Code, Err: fmt.Errorf("%w; %s", ee.Err, say)}
	}
	return fmt.Errorf("%w; %s", err, say)
}

func (b *bulk) runs() []bulkRun {
	if b.created == nil {
		return []bulkRun{}
	}
	return b.created
}
