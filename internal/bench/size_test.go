package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBenchParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true}, {"4KiB", 4 << 10, true}, {"16MiB", 16 << 20, true}, {"1GiB", 1 << 30, true},
		{"1.5MiB", 3 << 19, true}, {"500KB", 500e3, true}, {"50MB", 50e6, true}, {"100B", 100, true},
		{" 2 MiB ", 2 << 20, true}, {"64M", 64 << 20, true}, {"0", 0, true},
		{"12x", 0, false}, {"-1", 0, false}, {"", 0, false}, {"MiB", 0, false}, {"-1.5KiB", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestBenchParseDist(t *testing.T) {
	for _, tc := range []struct {
		in     string
		ranges []SizeRange // nil: only check that it parses
		ok     bool
	}{
		{"4KiB", []SizeRange{{4096, 4096, 1}}, true},
		{"leofs", nil, true}, {"AFS", nil, true}, {"clawio", nil, true},
		{"1KiB-10KiB:24,10KiB-100KiB:30", []SizeRange{{1024, 10240, 24}, {10240, 102400, 30}}, true},
		{"4KiB:50, 1MiB:50%", []SizeRange{{4096, 4096, 50}, {1 << 20, 1 << 20, 50}}, true},
		{"1KiB-2KiB", []SizeRange{{1024, 2048, 1}}, true},
		{"", nil, false}, {"12x", nil, false}, {"2KiB-1KiB:5", nil, false}, {"1KiB-2KiB:0", nil, false},
		{"1KiB-2KiB:x", nil, false}, {"1KiB-x:3", nil, false}, {"-5", nil, false}, {"4KiB,", nil, false},
	} {
		d, err := ParseDist(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseDist(%q): err = %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if err != nil || tc.ranges == nil {
			continue
		}
		if len(d.Ranges) != len(tc.ranges) {
			t.Errorf("ParseDist(%q) = %v, want %v", tc.in, d.Ranges, tc.ranges)
			continue
		}
		for i := range tc.ranges {
			if d.Ranges[i] != tc.ranges[i] {
				t.Errorf("ParseDist(%q) range %d = %v, want %v", tc.in, i, d.Ranges[i], tc.ranges[i])
			}
		}
	}
}

// checkShares draws 100,000 sizes with a fixed seed and checks that each range's share is
// within one percentage point of its target, and that each size lies in its range.
func checkShares(t *testing.T, d *Dist, targets []float64) {
	t.Helper()
	if len(targets) > len(d.Ranges) {
		t.Fatalf("%d targets for %d ranges", len(targets), len(d.Ranges))
	}
	const n = 100_000
	r := rand.New(rand.NewPCG(42, 7))
	counts := make([]int, len(d.Ranges))
	for range n {
		size, i := d.draw(r)
		if !d.Ranges[i].Contains(size) {
			t.Fatalf("%s: size %d drawn from range %d %v lies outside it", d.Name, size, i, d.Ranges[i])
		}
		counts[i]++
	}
	for i, want := range targets {
		got := 100 * float64(counts[i]) / n
		if math.Abs(got-want) > 1 {
			t.Errorf("%s: range %s-%s: %.2f %% of draws, want %.2f %% ± 1", d.Name,
				FormatSize(d.Ranges[i].Lo), FormatSize(d.Ranges[i].Hi), got, want)
		}
	}
}

func TestBenchLeoFSShares(t *testing.T) {
	d := LeoFS()
	checkShares(t, d, []float64{24, 30, 30, 16})
	want := []SizeRange{{1 << 10, 10 << 10, 24}, {10 << 10, 100 << 10, 30}, {10 << 10, 800 << 10, 30}, {800 << 10, 1536 << 10, 16}}
	for i, r := range want {
		if d.Ranges[i] != r {
			t.Errorf("range %d = %v, want %v", i, d.Ranges[i], r)
		}
	}
}

func TestBenchAFSShares(t *testing.T) {
	d := AFS()
	targets := []float64{50.31, 8.04, 7.10, 7.99, 6.16, 4.66, 3.11, 3.38, 2.38, 1.59, 1.58, 1.42,
		0.86, 0.46, 0.37, 0.24, 0.13, 0.10, 0.10, 0.01}
	checkShares(t, d, targets)
	// The table is contiguous powers of two from 0 to 512 GiB.
	if d.Ranges[0].Lo != 0 || d.Ranges[0].Hi != 4<<10 || d.Ranges[19].Lo != 1<<30 || d.Max() != 512<<30-1 {
		t.Errorf("AFS table bounds: first %v, 1-2 GiB %v, max %d", d.Ranges[0], d.Ranges[19], d.Max())
	}
	for i := 1; i < len(d.Ranges); i++ {
		if d.Ranges[i].Lo != d.Ranges[i-1].Hi {
			t.Errorf("range %d starts at %d, previous ends at %d", i, d.Ranges[i].Lo, d.Ranges[i-1].Hi)
		}
	}
}

func TestBenchClawIOSet(t *testing.T) {
	d := ClawIO()
	var files, bytes float64
	for _, r := range d.Ranges {
		files += r.Weight
		bytes += r.Weight * float64(r.Lo)
	}
	// 98 MB of large files, 11 x 500 KB, 32 x 50 KB, 28 x 5 KB, 15 x 1 KB, 5 x 100 B.
	wantBytes := 98e6 + 11*500e3 + 32*50e3 + 28*5e3 + 15*1e3 + 5*100
	if files != 100 || bytes != wantBytes {
		t.Errorf("ClawIO set: %v files, %v bytes; want 100 files, %v bytes", files, bytes, wantBytes)
	}
	targets := make([]float64, len(d.Ranges))
	for i, r := range d.Ranges {
		targets[i] = r.Weight // of 100 files: the weight is the percentage
	}
	checkShares(t, d, targets)
}

func TestBenchCappedDist(t *testing.T) {
	const capSize = 1 << 20
	c := cappedDist{d: AFS(), cap: capSize}
	r := rand.New(rand.NewPCG(1, 2))
	var draws, redraws int
	below := make([]int, len(c.d.Ranges))
	const n = 100_000
	for range n {
		size, redrawn := c.draw(r)
		if size > capSize {
			t.Fatalf("drew %d above the cap", size)
		}
		draws += redrawn + 1
		redraws += redrawn
		for i, rg := range c.d.Ranges {
			if rg.Contains(size) {
				below[i]++
			}
		}
	}
	share := float64(redraws) / float64(draws)
	if want := c.d.ShareAbove(capSize); math.Abs(share-want) > 0.005 {
		t.Errorf("redrawn share %.4f, want %.4f", share, want)
	}
	// Below the cap the shares keep their proportions: 0-4 KiB vs 4-8 KiB is 50.31:8.04.
	if ratio := float64(below[0]) / float64(below[1]); math.Abs(ratio-50.31/8.04) > 0.4 {
		t.Errorf("0-4KiB : 4-8KiB = %.2f, want %.2f", ratio, 50.31/8.04)
	}
	if got := (cappedDist{d: Fixed(100)}).max(); got != 100 {
		t.Errorf("uncapped max = %d", got)
	}
	if got := c.max(); got != capSize {
		t.Errorf("capped max = %d", got)
	}
}

func TestBenchShareAbove(t *testing.T) {
	d := newDist("t", []SizeRange{{0, 100, 1}, {100, 100, 1}})
	for _, tc := range []struct {
		limit int64
		want  float64
	}{{1000, 0}, {100, 0}, {99, 0.5}, {49, 0.75}} {
		if got := d.ShareAbove(tc.limit); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ShareAbove(%d) = %v, want %v", tc.limit, got, tc.want)
		}
	}
}

func TestBenchFormatSize(t *testing.T) {
	for in, want := range map[int64]string{100: "100 B", 4096: "4 KiB", 3 << 19: "1.5 MiB", 1536000: "1.46 MiB", 64 << 30: "64 GiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}
