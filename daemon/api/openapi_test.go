package api_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flowforge/flowforge/daemon/api"
)

// TestTheOpenAPIDocumentDocumentsEveryRoute: docs/openapi.yaml is a valid
// OpenAPI 3 document (kin-openapi) whose operations are exactly the
// server's routes: every route documented, every documented operation
// served, path parameters named alike.
func TestTheOpenAPIDocumentDocumentsEveryRoute(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	var served []string
	for _, r := range api.Routes() {
		served = append(served, r.Method+" "+r.Pattern)
		if !strings.HasPrefix(r.Pattern, "/v1/") {
			t.Errorf("route %s %s is not under /v1", r.Method, r.Pattern)
		}
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, s := range served {
		if !slices.Contains(documented, s) {
			t.Errorf("route %s is served but not documented in %s", s, openAPIPath)
		}
	}
	for _, d := range documented {
		if !slices.Contains(served, d) {
			t.Errorf("%s documents %s, which the server does not serve", openAPIPath, d)
		}
	}
}

// TestEveryDocumentedOperationSaysWhichRoleItNeeds: each operation's
// summary names the role the server requires for it, so the document
// and the server agree on who may call what.
func TestEveryDocumentedOperationSaysWhichRoleItNeeds(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	role := regexp.MustCompile(`\((viewer|operator|admin)\b`)
	for _, r := range api.Routes() {
		op := doc.Paths.Find(r.Pattern).GetOperation(r.Method)
		if op == nil {
			continue // TestTheOpenAPIDocumentDocumentsEveryRoute reports it
		}
		m := role.FindStringSubmatch(op.Summary)
		if m == nil || m[1] != string(r.Need) {
			t.Errorf("%s %s needs %s; its summary %q says %v", r.Method, r.Pattern, r.Need, op.Summary, m)
		}
	}
}
