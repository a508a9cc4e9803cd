package policy

import (
	"os"
	"strings"
	"testing"
)

// TestDesignDocExamples parses every policy shown in the operators' design
// note, so that the examples stay valid, and checks the first example's table.
func TestDesignDocExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/design/20261123_policy.md")
	if err != nil {
		t.Fatalf("design note not found: %v", err)
	}
	var blocks []string
	for i, part := range strings.Split(string(data), "```") {
		// Odd parts are inside fences; those with a language tag (go) are code.
		if i%2 == 1 && strings.HasPrefix(part, "\n") && !strings.HasPrefix(part, "\npolicy.Parse:") {
			blocks = append(blocks, part[1:])
		}
	}
	if len(blocks) < 5 {
		t.Fatalf("found %d policy examples in the design note, want at least 5", len(blocks))
	}
	for _, b := range blocks {
		p, err := Parse([]byte(b))
		if err != nil {
			t.Errorf("example does not parse: %v\n%s", err, b)
			continue
		}
		if p.Len() == 0 {
			t.Errorf("example has no rules:\n%s", b)
		}
	}
	// The first block is the first example, the canonical form is shown later.
	first := mustParse(t, blocks[0])
	if first.String() != docCanonical {
		t.Errorf("first example's canonical form:\n%s", first.String())
	}
	if !strings.Contains(string(data), docCanonical) {
		t.Errorf("the note does not show the first example's canonical form:\n%s", first.String())
	}
	for _, c := range []check{
		{obj("run7/events.root", 5*gib, ""), "EC42", 0},
		{obj("notes.txt", 100, ""), "STANDARD", 1},
		{obj("logs/2024/app.gz", 2*mib, ""), "EC83", 2},
		{obj("cat.jpg", 5*mib, ""), "EC42", 3},
		{obj("cat.jpg", 2*gib, ""), "EC83", 4},
		{obj("big.bin", 100*kib, ""), "STANDARD", -1},
		{obj("big.bin", -1, ""), "STANDARD", -1},
	} {
		if class, rule := first.Evaluate(c.obj); class != c.class || rule != c.rule {
			t.Errorf("first example, %+v: %q, %d; the note says %q (rule %d)", c.obj, class, rule, c.class, c.rule)
		}
	}
}

const docCanonical = `default STANDARD
key "*.root" => EC42
size < 64KiB => STANDARD
key ~ "^logs/[0-9]{4}/.*\.gz$" and size >= 1MiB => EC83
type "image/*" or key "*.jpg" => EC42 continue
not size <= 1GiB => EC83
`
