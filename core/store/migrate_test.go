package store_test

import (
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// TestEveryMigrationDeclaresItsCompatFloor: each embedded file says whether
// it is an expand or a contract migration, with a floor from 1 to its own
// version; and the binary's minimum lies within its migrations.
func TestEveryMigrationDeclaresItsCompatFloor(t *testing.T) {
	t.Parallel()
	ms, err := store.EmbeddedMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no embedded migrations")
	}
	for _, m := range ms {
		if !m.Declared {
			t.Errorf("%s has no \"-- flowforge:compat-floor N\" line (see sql/migrations/README.md)", m.Path)
		}
		if m.CompatFloor < 1 || m.CompatFloor > m.Version {
			t.Errorf("%s: compat floor %d, want 1..%d", m.Path, m.CompatFloor, m.Version)
		}
	}
	w, err := store.EmbeddedSchemaWindow()
	if err != nil {
		t.Fatal(err)
	}
	if w.Min < 1 || w.Min > w.Latest {
		t.Errorf("SchemaVersionMin %d outside the embedded migrations 1..%d", w.Min, w.Latest)
	}
}
