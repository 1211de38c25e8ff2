package store_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/core/store"
)

// updateSchemaFingerprint rewrites schema_fingerprint.txt from a freshly
// migrated database: the one command to run after adding a migration.
var updateSchemaFingerprint = flag.Bool("update-schema-fingerprint", false,
	"rewrite core/store/schema_fingerprint.txt from a freshly migrated database")

// TestSchemaFingerprintMatchesTheMigrations: the golden fingerprint that
// `ffctl doctor` compares a live database with is the one the embedded
// migrations produce. It fails while the golden is stale (a migration was
// added or changed); regenerate it with
//
//	go test ./core/store -run TestSchemaFingerprintMatchesTheMigrations -update-schema-fingerprint
func TestSchemaFingerprintMatchesTheMigrations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	live, err := f.s.SchemaFingerprint(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *updateSchemaFingerprint {
		if err := os.WriteFile("schema_fingerprint.txt", []byte(strings.Join(live, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	missing, unexpected := store.SchemaDrift(live, store.SchemaFingerprintGolden())
	if len(missing)+len(unexpected) > 0 {
		t.Fatalf("schema_fingerprint.txt is stale: run\n  go test ./core/store -run TestSchemaFingerprintMatchesTheMigrations -update-schema-fingerprint\n"+
			"golden lines the migrations no longer produce: %q\nlines the migrations produce that the golden lacks: %q", unexpected, missing)
	}
}

// TestSchemaDriftNamesMissingAndUnexpectedLines: the comparison behind the
// drift finding, as data.
func TestSchemaDriftNamesMissingAndUnexpectedLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		live, want       []string
		missing, unknown []string
	}{
		{"same", []string{"a", "b"}, []string{"a", "b"}, nil, nil},
		{"dropped", []string{"a"}, []string{"a", "b"}, []string{"b"}, nil},
		{"added", []string{"a", "b", "c"}, []string{"a", "b"}, nil, []string{"c"}},
		{"changed", []string{"a", "b2"}, []string{"a", "b1"}, []string{"b1"}, []string{"b2"}},
		{"empty live", nil, []string{"a"}, []string{"a"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, u := store.SchemaDrift(tc.live, tc.want)
			if strings.Join(m, ",") != strings.Join(tc.missing, ",") || strings.Join(u, ",") != strings.Join(tc.unknown, ",") {
				t.Fatalf("missing %q unexpected %q, want %q %q", m, u, tc.missing, tc.unknown)
			}
		})
	}
}

// TestSchemaFingerprintLeavesOutExtensions: an extension installed in the
// FlowForge schema (its functions, its tables) is no drift.
func TestSchemaFingerprintLeavesOutExtensions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var schema string
	if err := f.db.QueryRowContext(f.ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	f.sql(`CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA ` + schema)
	live, err := f.s.SchemaFingerprint(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if missing, unexpected := store.SchemaDrift(live, store.SchemaFingerprintGolden()); len(missing)+len(unexpected) > 0 {
		t.Fatalf("an extension reads as drift: missing %q, unexpected %q", missing, unexpected)
	}
}
