package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencyRules checks that internal packages import each other only along the
// allowed edges (docs/architecture.md): the storage engine knows nothing of HTTP or S3,
// and nothing imports the layers above it.
func TestDependencyRules(t *testing.T) {
	const mod = "github.com/cairnfs/cairn/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "../../internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string][]string{
		"internal/errors":              {},
		"internal/checksum":            {},
		"internal/sigv4":               {},
		"internal/store/segment":       {"internal/errors"},
		"internal/hlc":                 {},
		"internal/object":              {"internal/errors"},
		"internal/wire":                {"internal/errors", "internal/object"},
		"internal/store":               {"internal/errors", "internal/hlc", "internal/object", "internal/store/segment"},
		"internal/placement":           {},
		"internal/policy":              {"internal/errors"},
		"internal/lifecycle":           {},
		"internal/clustermap":          {"internal/errors", "internal/policy"},
		"internal/erasure":             {"internal/errors"},
		"internal/rpc":                 {"internal/errors", "internal/wire"},
		"internal/replica":             {"internal/errors", "internal/object", "internal/placement", "internal/rpc", "internal/store", "internal/wire"},
		"internal/replica/replicatest": {"internal/errors", "internal/object", "internal/replica", "internal/store"},
		"internal/topology":            {"internal/clustermap", "internal/errors", "internal/placement"},
		"internal/stripe":              {"internal/clustermap", "internal/erasure", "internal/errors", "internal/hlc", "internal/object", "internal/placement", "internal/replica", "internal/topology"},
		"internal/hints":               {"internal/errors", "internal/object"},
		"internal/gateway":             {"internal/clustermap", "internal/errors", "internal/hints", "internal/hlc", "internal/object", "internal/policy", "internal/replica", "internal/rpc", "internal/store", "internal/stripe", "internal/topology"},
		"internal/budget":              {},
		"internal/repair":              {"internal/budget", "internal/lifecycle", "internal/clustermap", "internal/erasure", "internal/errors", "internal/hints", "internal/hlc", "internal/object", "internal/placement", "internal/policy", "internal/replica", "internal/store", "internal/stripe", "internal/topology"},
		"internal/s3api":               {"internal/access", "internal/errors", "internal/gateway", "internal/notify", "internal/object", "internal/sigv4", "internal/checksum", "internal/sse", "internal/lifecycle"},
		// Bucket notifications: configurations, outbox entries, events, targets, the
		// deliverer; placement and the store come in through functions the server gives.
		"internal/notify": {"internal/errors", "internal/object"},
		// Replication between clusters: the batch frames and the investigation's digests;
		// sending, signing and applying are server's.
		"internal/mdc":     {"internal/errors", "internal/object", "internal/placement"},
		"internal/sse":     {"internal/errors"},
		"internal/access":  {"internal/errors"},
		"internal/metrics": {},
		"internal/console": {"internal/errors"},
		"internal/server":  {"internal/budget", "internal/console", "internal/hints", "internal/repair", "internal/topology", "internal/clustermap", "internal/errors", "internal/gateway", "internal/hlc", "internal/mdc", "internal/metrics", "internal/nbd", "internal/nodetls", "internal/notify", "internal/object", "internal/replica", "internal/rpc", "internal/s3api", "internal/secrets", "internal/store", "internal/tier", "internal/volume", "internal/wire"},
		"internal/tier":    {"internal/errors", "internal/sigv4"},
		"internal/secrets": {"internal/errors"},
		"internal/nbd":     {"internal/errors"},
		"internal/volume":  {"internal/clustermap", "internal/erasure", "internal/errors", "internal/nbd", "internal/object", "internal/placement", "internal/replica", "internal/topology"},
		// The cluster CA, node certificates and enrolment messages: pure crypto/x509 over
		// the wire's message types; who holds the key and when a node enrols is server's.
		"internal/nodetls":           {"internal/errors", "internal/wire"},
		"internal/testutil":          {"internal/gateway", "internal/store", "internal/s3api"},
		"internal/bench":             {"internal/sigv4"},
		"internal/bench/plot":        {"internal/bench"},
		"internal/proc":              {},
		"internal/testutil/proctest": {"internal/proc"},
		"internal/testutil/browser":  {},
		"internal/testutil/testcert": {},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		ok, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no dependency rule: add it here and to docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, mod) {
				continue
			}
			dep := strings.TrimPrefix(imp, mod)
			found := false
			for _, a := range ok {
				found = found || a == dep
			}
			if !found {
				t.Errorf("%s must not import %s", pkg, dep)
			}
		}
	}
}

// TestPackageDocs checks that every package under internal/, cmd/ and tools/ has a doc
// comment that names it ("Package x ...", or "Command x ..." for a command), saying what
// it is.
func TestPackageDocs(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.Name}}|{{.ImportPath}}|{{.Doc}}`, "../../internal/...", "../../cmd/...", "../../tools/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, rest, _ := strings.Cut(line, "|")
		pkg, doc, _ := strings.Cut(rest, "|")
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + path.Base(pkg) + " "
		}
		if !strings.HasPrefix(doc+" ", want) {
			t.Errorf("%s: package doc %q, want a comment starting %q", pkg, doc, want)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("only %d packages listed", n)
	}
}

// TestEveryPackageTested: make test runs the tests of every package under internal/ (in
// RACE_PKGS, or the long tier's list): a package added without being listed would have
// its tests run by nobody.
func TestEveryPackageTested(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(strings.NewReplacer("\\\n", " ").Replace(string(mk))) {
		if strings.HasPrefix(f, "./internal/") {
			listed[strings.TrimPrefix(f, "./")] = true
		}
	}
	covered := func(pkg string) bool {
		for p := pkg; p != "." && p != "/"; p = filepath.Dir(p) {
			if listed[p+"/..."] || (p == pkg && listed[p]) {
				return true
			}
		}
		return false
	}
	out, err := exec.Command("go", "list", "../../internal/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(pkg, "github.com/cairnfs/cairn/")
		if !covered(rel) {
			t.Errorf("make test does not run the tests of %s: add ./%s/... to RACE_PKGS in the Makefile", rel, rel)
		}
	}
}
