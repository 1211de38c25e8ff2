package tui

import "strconv"

// The list screens' tables are filterable ("/") and their selected row's
// id copyable ("y"). The Runs screen filters in the database (its own
// "/"), so it is only copyable.

func (m *runModel) filterTable() *table     { return &m.tbl }
func (m *taskModel) filterTable() *table    { return &m.tbl }
func (m *leasesModel) filterTable() *table  { return &m.tbl }
func (m *outboxModel) filterTable() *table  { return &m.tbl }
func (m *deadModel) filterTable() *table    { return &m.tbl }
func (m *workersModel) filterTable() *table { return &m.tbl }

// selectedKey is the key of the table's selected row: a run, task or
// worker id.
func selectedKey(t *table) (string, bool) {
	r, ok := t.selected()
	if !ok || r.key == "" {
		return "", false
	}
	return r.key, true
}

// selectedID: the run under the cursor.
func (m *runsModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

// selectedID: the task under the cursor.
func (m *runModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

// selectedID: the task shown.
func (m *taskModel) selectedID() (string, bool) { return m.id, m.id != "" }

// selectedID: the task whose lease is under the cursor.
func (m *leasesModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

// selectedID: the DEAD task under the cursor.
func (m *deadModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

// selectedID: the process under the cursor.
func (m *workersModel) selectedID() (string, bool) { return selectedKey(&m.tbl) }

// selectedID: the task of the dispatch under the cursor.
func (m *outboxModel) selectedID() (string, bool) {
	r, ok := m.tbl.selected()
	if !ok {
		return "", false
	}
	for _, o := range m.data.Oldest {
		if r.key == strconv.FormatInt(o.ID, 10) {
			return o.TaskRunID.String(), true
		}
	}
	return "", false
}
