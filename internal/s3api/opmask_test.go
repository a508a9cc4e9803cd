package s3api

import "testing"

// Every operation has a bit of its own, also past the 64th.
func TestOpMaskDistinct(t *testing.T) {
	seen := map[opMask]string{}
	for _, n := range opNames {
		b := opBits[n]
		if b == (opMask{}) {
			t.Fatalf("%s has no bit", n)
		}
		if o, ok := seen[b]; ok {
			t.Fatalf("%s and %s share a bit", n, o)
		}
		seen[b] = n
	}
	var wide opMask
	wide[1] = 1
	if wide.has(opBits[opNames[0]]) || !wide.has(wide) {
		t.Fatal("opMask.has compares the wrong words")
	}
}
