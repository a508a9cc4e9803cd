package main

import (
	"os/exec"
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
		"internal/clustermap":          {"internal/errors", "internal/policy"},
		"internal/erasure":             {"internal/errors"},
		"internal/rpc":                 {"internal/errors", "internal/wire"},
		"internal/replica":             {"internal/errors", "internal/object", "internal/placement", "internal/rpc", "internal/store", "internal/wire"},
		"internal/replica/replicatest": {"internal/errors", "internal/object", "internal/replica", "internal/store"},
		"internal/gateway":             {"internal/clustermap", "internal/erasure", "internal/errors", "internal/policy", "internal/hlc", "internal/object", "internal/placement", "internal/replica", "internal/rpc", "internal/store", "internal/wire"},
		"internal/s3api":               {"internal/errors", "internal/gateway", "internal/object", "internal/sigv4", "internal/checksum"},
		"internal/metrics":             {},
		"internal/server":              {"internal/clustermap", "internal/errors", "internal/gateway", "internal/hlc", "internal/metrics", "internal/replica", "internal/rpc", "internal/s3api", "internal/store", "internal/wire"},
		"internal/testutil":            {"internal/gateway", "internal/store", "internal/s3api"},
		"internal/bench":               {"internal/sigv4"},
		"internal/bench/plot":          {"internal/bench"},
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
