package tui

import (
	"context"
	"fmt"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/google/uuid"
)

// Action requests, sent by a screen once its prompt is confirmed; the root
// runs them through Source (the CLI's code paths) in a command.
type (
	requeueMsg struct {
		ids    []uuid.UUID
		reason string
	}
	cancelRunMsg struct {
		id     uuid.UUID
		reason string
	}
	// pauseMsg pauses (resume false) or resumes a workflow.
	pauseMsg struct {
		workflow string
		resume   bool
		reason   string
	}
	// refreshMsg asks for an immediate read of the current screen.
	refreshMsg struct{}
)

// act runs an action through Source in a command, bounded by
// ActionTimeout; in read-only mode there is none (nil).
func (m *Model) act(do func(ctx context.Context, src Source) tea.Msg) tea.Cmd {
	if m.c.readOnly {
		return nil
	}
	src := m.src
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), ActionTimeout)
		defer cancel()
		return do(ctx, src)
	}
}

func (m *Model) requeue(msg requeueMsg) tea.Cmd {
	return m.act(func(ctx context.Context, src Source) tea.Msg {
		res, err := src.Requeue(ctx, msg.ids, msg.reason)
		if err != nil {
			return actionMsg{text: "requeue", err: err}
		}
		ok := 0
		var firstErr error
		for _, r := range res {
			if r.Requeued() {
				ok++
			} else if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", shortID(r.ID), r.Err())
			}
		}
		return actionMsg{text: fmt.Sprintf("requeued %d of %d", ok, len(msg.ids)), err: firstErr}
	})
}

func (m *Model) pauseWorkflow(msg pauseMsg) tea.Cmd {
	return m.act(func(ctx context.Context, src Source) tea.Msg {
		if msg.resume {
			res, err := src.ResumeWorkflow(ctx, msg.workflow, msg.reason)
			switch {
			case err != nil:
				return actionMsg{text: "resume " + msg.workflow, err: err}
			case !res.Resumed:
				return actionMsg{text: msg.workflow + " is not paused; nothing to resume"}
			}
			return actionMsg{text: fmt.Sprintf("resumed %s: %s dispatched again", msg.workflow, plural(res.Redispatched, "handed-back task"))}
		}
		res, err := src.PauseWorkflow(ctx, msg.workflow, msg.reason)
		switch {
		case err != nil:
			return actionMsg{text: "pause " + msg.workflow, err: err}
		case !res.Changed:
			return actionMsg{text: msg.workflow + " is already paused; nothing changed"}
		}
		return actionMsg{text: "paused " + msg.workflow + ": no task of it is dispatched until it is resumed"}
	})
}

func (m *Model) cancelRun(msg cancelRunMsg) tea.Cmd {
	return m.act(func(ctx context.Context, src Source) tea.Msg {
		res, err := src.CancelRun(ctx, msg.id, msg.reason)
		if err != nil {
			return actionMsg{text: "cancel run " + shortID(msg.id), err: err}
		}
		return actionMsg{text: fmt.Sprintf("run %s: cancellation requested, %s cancelled", shortID(msg.id), plural(res.TasksCancelled, "unstarted task"))}
	})
}
