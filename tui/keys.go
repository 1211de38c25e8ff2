package tui

import "github.com/charmbracelet/bubbles/key"

// globalKeys work on every screen (unless a text field has the focus).
type globalKeys struct {
	Quit    key.Binding
	Help    key.Binding
	Next    key.Binding
	Prev    key.Binding
	Refresh key.Binding
	Jump    key.Binding
	Copy    key.Binding
	Screens []key.Binding
}

func newGlobalKeys() globalKeys {
	return globalKeys{
		Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Next:    key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next screen")),
		Prev:    key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous screen")),
		Refresh: key.NewBinding(key.WithKeys("ctrl+r"), key.WithHelp("ctrl+r", "refresh now")),
		Jump:    key.NewBinding(key.WithKeys(":"), key.WithHelp(":", "jump to a run or task id")),
		Copy:    key.NewBinding(key.WithKeys("y"), key.WithHelp("y", "copy id (OSC 52)")),
		Screens: []key.Binding{
			key.NewBinding(key.WithKeys("1"), key.WithHelp("1", "runs")),
			key.NewBinding(key.WithKeys("2"), key.WithHelp("2", "run")),
			key.NewBinding(key.WithKeys("3"), key.WithHelp("3", "leases")),
			key.NewBinding(key.WithKeys("4"), key.WithHelp("4", "outbox")),
			key.NewBinding(key.WithKeys("5"), key.WithHelp("5", "dead")),
			key.NewBinding(key.WithKeys("6"), key.WithHelp("6", "workers")),
			key.NewBinding(key.WithKeys("7"), key.WithHelp("7", "workflows")),
			key.NewBinding(key.WithKeys("8"), key.WithHelp("8", "schedules")),
			key.NewBinding(key.WithKeys("9"), key.WithHelp("9", "limits")),
		},
	}
}

// navKeys move a table's cursor.
type navKeys struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
}

func newNavKeys() navKeys {
	return navKeys{
		Up:       key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:     key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		PageUp:   key.NewBinding(key.WithKeys("pgup", "ctrl+b"), key.WithHelp("pgup", "page up")),
		PageDown: key.NewBinding(key.WithKeys("pgdown", "ctrl+f"), key.WithHelp("pgdn", "page down")),
		Top:      key.NewBinding(key.WithKeys("home", "g"), key.WithHelp("g/home", "top")),
		Bottom:   key.NewBinding(key.WithKeys("end", "G"), key.WithHelp("G/end", "bottom")),
	}
}

func (k navKeys) bindings() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}
}

// navigate applies a navigation key to t; it reports whether msg was one.
func (k navKeys) navigate(msg keyMsg, t *table, page int) bool {
	switch {
	case key.Matches(msg, k.Up):
		t.move(-1)
	case key.Matches(msg, k.Down):
		t.move(1)
	case key.Matches(msg, k.PageUp):
		t.move(-max(page, 1))
	case key.Matches(msg, k.PageDown):
		t.move(max(page, 1))
	case key.Matches(msg, k.Top):
		t.top()
	case key.Matches(msg, k.Bottom):
		t.bottom()
	default:
		return false
	}
	return true
}

// Per-screen keys.
var (
	keyOpen     = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open"))
	keyHistory  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "attempt history"))
	keyFilter   = key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter"))
	keyClear    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter"))
	keyBack     = key.NewBinding(key.WithKeys("esc", "backspace"), key.WithHelp("esc", "back"))
	keyCancel   = key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "cancel run"))
	keyMark     = key.NewBinding(key.WithKeys(" ", "space"), key.WithHelp("space", "mark"))
	keyMarkAll  = key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "mark all"))
	keyUnmark   = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear marks"))
	keyRequeue  = key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "requeue"))
	keyBarKeep  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "keep filter"))
	keyBarClear = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear filter"))
	keyBarJump  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "jump"))
	keyTrigger  = key.NewBinding(key.WithKeys("t"), key.WithHelp("t", "trigger a run"))
	keyPause    = key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "(un)pause"))
	keyConfirm  = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "confirm"))
	keyAbort    = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel"))
	keyApply    = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "apply"))
	keyDiscard  = key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "discard"))
	keyQuitHelp = key.NewBinding(key.WithKeys("?", "esc"), key.WithHelp("?/esc", "close help"))
	// keyChild opens the child run of the selected task (a `workflow:`
	// task) and keyParent the run whose task started the one shown; esc
	// then comes back (runtrail.go).
	keyChild  = key.NewBinding(key.WithKeys("o"), key.WithHelp("o", "open child run"))
	keyParent = key.NewBinding(key.WithKeys("u"), key.WithHelp("u", "up to parent run"))
)
