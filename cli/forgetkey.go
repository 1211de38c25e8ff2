package cli

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/urfave/cli/v2"

	"github.com/flowforge/flowforge/core"
	"github.com/flowforge/flowforge/core/store"
)

// forgetKeyCommand is `ffctl task forget-key`.
func forgetKeyCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:  "forget-key",
		Usage: "release the idempotency key a task run carries, so the next run with it runs its handler (audited)",
		UsageText: "ffctl task forget-key TASK_RUN_ID --reason R [-o json]\n\n" +
			"TASK_RUN_ID is any task run that carries the key: its owner, one that reused its result\n" +
			"(see reused_from in `ffctl run show`), or one waiting for it. The key's recorded result is\n" +
			"no longer reused: the next task run with the key runs its handler. Refused (exit 1) while\n" +
			"the key's owner is RUNNING. The forget is audited (who, when, why, and the forgotten\n" +
			"result) in the table idempotency_key_events. To let results expire on their own, give\n" +
			"the task an idempotency_ttl.\n\n" +
			"Example:\n  ffctl task forget-key 3f1f8e2b-8f0a-4c7e-9d55-0b7c6d2e7a10 --reason 'extract bug fixed; re-run 2026-11-30'",
		Flags:  []cli.Flag{reasonFlag(requiredReason("why")), outputFlag()},
		Action: func(c *cli.Context) error { return taskForgetKey(c, env) },
	}
}

// forgetKeyResult is the JSON of `task forget-key -o json`.
type forgetKeyResult struct {
	TaskRunID uuid.UUID `json:"task_run_id"`
	Forgotten bool      `json:"forgotten"`
	store.ForgottenKey
}

func taskForgetKey(c *cli.Context, env *Env) error {
	a, err := newIDAction(c, env, store.IDTask, "forget-key", "why the key's result must not be reused")
	if err != nil {
		return err
	}
	defer a.s.Close()
	id, format := a.id, a.format
	res, err := a.s.ForgetIdempotencyKey(c.Context, id, actor(), a.reason)
	if err != nil {
		return failure(err)
	}
	if format == "json" {
		return writeJSON(env.Stdout, forgetKeyResult{TaskRunID: id, Forgotten: true, ForgottenKey: res})
	}
	what := "it had no recorded result"
	if res.Completed {
		what = "its recorded result is no longer reused"
	}
	fmt.Fprintf(env.Stdout, "idempotency key %q forgotten (held by %s; %s): the next task run with it runs its handler\n",
		core.TerminalText(res.Key), res.Owner, what)
	return nil
}
