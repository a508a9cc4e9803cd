package policy

import (
	"fmt"
	"strings"
	"testing"
)

// benchPolicy returns a policy of n rules in which only the last matches
// benchObject, so Evaluate tries every rule (the worst case).
//
// Glob rules alternate between a last-element suffix ("*.raw3"), rejected by
// the suffix fast path, and a whole-key pattern with "**"
// ("photos/**/x3_*.jpg") whose literal prefix and suffix both match, so the
// element-by-element matcher runs before rejecting it. Regex rules are
// anchored expressions of the same shape as the matching one.
func benchPolicy(n int, kind string) string {
	var b strings.Builder
	for i := range n - 1 {
		switch {
		case kind == "regex":
			fmt.Fprintf(&b, "key ~ \"^photos/[0-9]{4}/[0-9]{2}/X%d_[0-9]+\\.jpg$\" => C%d\n", i, i)
		case i%2 == 0:
			fmt.Fprintf(&b, "*.raw%d => C%d\n", i, i)
		default:
			fmt.Fprintf(&b, "photos/**/x%d_*.jpg => C%d\n", i, i)
		}
	}
	if kind == "regex" {
		b.WriteString("key ~ \"^photos/[0-9]{4}/[0-9]{2}/IMG_[0-9]+\\.jpg$\" => HIT\n")
	} else {
		b.WriteString("photos/**/IMG_*.jpg => HIT\n")
	}
	return b.String()
}

var benchObject = Object{Key: "photos/2024/06/IMG_1234.jpg", Size: 3 << 20, ContentType: "image/jpeg"}

func BenchmarkEvaluate(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		for _, kind := range []string{"glob", "regex"} {
			b.Run(fmt.Sprintf("%drules/%s", n, kind), func(b *testing.B) {
				p := mustParse(b, benchPolicy(n, kind))
				if class, rule := p.Evaluate(benchObject); class != "HIT" || rule != n-1 {
					b.Fatalf("Evaluate = %q, %d; want HIT, %d", class, rule, n-1)
				}
				b.ReportAllocs()
				cpu0 := processCPU()
				for b.Loop() {
					p.Evaluate(benchObject)
				}
				if cpu1 := processCPU(); cpu0 >= 0 && cpu1 >= 0 {
					b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

func BenchmarkParse(b *testing.B) {
	for _, kind := range []string{"glob", "regex"} {
		b.Run("100rules/"+kind, func(b *testing.B) {
			src := []byte(benchPolicy(100, kind))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
