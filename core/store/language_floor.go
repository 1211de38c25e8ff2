package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/flowforge/flowforge/core"
)

// LanguageFloor is the schema version of the workflow language (migration
// 00016): the oldest binary that reads SKIPPED tasks, for_each elements
// and the definitions that make them.
const LanguageFloor int64 = 16

// HeldTasksFloor is the schema version of the held tasks (migration
// 00017): the oldest binary that knows a sleep, a wait and a child run are
// the scheduler's, never a worker's.
const HeldTasksFloor int64 = 17

// FlowControlFloor is the schema version of flow control (migration
// 00018): the oldest binary that leaves a task waiting for its admission
// undispatched (an older one's redispatch would send it).
const FlowControlFloor int64 = 18

// qRaiseLanguageFloor raises the recorded compat floor of migration
// LanguageFloor to itself (it is applied as an expand, floor 2). A floor is
// never lowered afterwards: Migrate's record of the embedded floors only
// raises one (upsertSchemaCompat).
const qRaiseLanguageFloor = `
INSERT INTO schema_compat (version, min_binary_version) VALUES ($1, $1)
ON CONFLICT (version) DO UPDATE SET min_binary_version = $1, recorded_at = now()
 WHERE schema_compat.min_binary_version < $1`

// raiseLanguageFloor raises, in tx, the database's compat floor to
// LanguageFloor when def uses the language (core.Definition.UsesLanguage):
// the version tx stores would be run wrongly by an older binary (its
// when, trigger rules, on_failure and for_each ignored; SKIPPED read as a
// state it does not know), and to HeldTasksFloor too when def has a
// sleep, a wait or a child run (core.Definition.HoldsTasks), and to
// FlowControlFloor when def has a concurrency key or a rate limit
// (core.Definition.UsesFlowControl), so from this
// commit on an older binary refuses
// to start (SchemaWindow.Check). One already running is not stopped:
// apply such a version once every daemon runs this release
// (docs/operating.md, Upgrading).
func raiseLanguageFloor(ctx context.Context, tx *sqlx.Tx, def *core.Definition) error {
	if def.UsesFlowControl() {
		if _, err := tx.ExecContext(ctx, qRaiseLanguageFloor, FlowControlFloor); err != nil {
			return fmt.Errorf("raise the schema's compat floor for concurrency and rate_limit: %w", err)
		}
	}
	if !def.UsesLanguage() {
		return nil
	}
	if _, err := tx.ExecContext(ctx, qRaiseLanguageFloor, LanguageFloor); err != nil {
		return fmt.Errorf("raise the schema's compat floor for the workflow language: %w", err)
	}
	if !def.HoldsTasks() {
		return nil
	}
	if _, err := tx.ExecContext(ctx, qRaiseLanguageFloor, HeldTasksFloor); err != nil {
		return fmt.Errorf("raise the schema's compat floor for sleep, wait_for and workflow tasks: %w", err)
	}
	return nil
}
