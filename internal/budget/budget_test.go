package budget

import (
	"testing"
	"time"
)

const MiB = 1 << 20

// The controller, driven with chosen inputs: under client load it halves the rate
// (from what the background really moved) down to the floor; with the clients back
// under the target it climbs back by an eighth per interval; quiet clients give the full
// ceiling at once; the target is learned from intervals without background work.
func TestControllerBacksOffAndRecovers(t *testing.T) {
	c := Controller{Target: 10 * time.Millisecond}
	iv := 500 * time.Millisecond
	rate := int64(64 * MiB)
	busy := Input{ClientOps: 500, ClientP99: 40 * time.Millisecond, Interval: iv, Ceiling: 64 * MiB}
	var seen []int64
	for range 10 {
		in := busy
		in.Rate = rate
		in.Background = rate / 2 // what it moved in half a second
		rate = c.Step(in)
		seen = append(seen, rate)
	}
	if seen[0] != 32*MiB || seen[1] != 16*MiB || rate != c.Floor {
		t.Fatalf("backing off: %v", seen)
	}
	calm := Input{ClientOps: 500, ClientP99: 2 * time.Millisecond, Interval: iv, Ceiling: 64 * MiB}
	steps := 0
	for rate < 64*MiB {
		in := calm
		in.Rate, in.Background = rate, rate/2
		next := c.Step(in)
		if next <= rate {
			t.Fatalf("not climbing: %d after %d", next, rate)
		}
		rate = next
		steps++
		if steps > 100 {
			t.Fatal("never back at the ceiling")
		}
	}
	t.Logf("back from the floor to the ceiling in %d intervals", steps)
	if got := c.Step(Input{ClientOps: 500, ClientP99: 40 * time.Millisecond, Interval: iv, Rate: 64 * MiB, Ceiling: 64 * MiB}); got != 32*MiB {
		t.Fatalf("backing off from an unused rate: %d", got)
	}
	if got := c.Step(Input{ClientOps: 3, ClientP99: time.Second, Interval: iv, Rate: 2 * MiB, Ceiling: 64 * MiB}); got != 64*MiB {
		t.Fatalf("quiet clients: %d, want the ceiling", got)
	}
	if got := c.Step(Input{ClientOps: 3, Interval: iv, Rate: 2 * MiB}); got != 0 {
		t.Fatalf("quiet clients, no ceiling: %d, want unlimited", got)
	}
	// Unlimited in force, and the background moves 200 MiB/s: the first back-off halves that.
	if got := c.Step(Input{ClientOps: 500, ClientP99: time.Second, Interval: iv, Background: 100 * MiB}); got != 100*MiB {
		t.Fatalf("backing off from unlimited: %d", got)
	}
}

func TestControllerLearnsTarget(t *testing.T) {
	var c Controller
	if c.target() != DefaultTarget {
		t.Fatalf("target before learning: %v", c.target())
	}
	for range 30 { // clients alone, at 3 ms
		c.Step(Input{ClientOps: 100, ClientP99: 3 * time.Millisecond, Interval: time.Second, Rate: 10 * MiB, Ceiling: 10 * MiB})
	}
	if got := c.target(); got != 6*time.Millisecond {
		t.Fatalf("learned target %v, want 6ms", got)
	}
	// 7 ms with background work running: above the target, back off.
	if got := c.Step(Input{ClientOps: 100, ClientP99: 7 * time.Millisecond, Interval: time.Second, Background: 10 * MiB, Rate: 10 * MiB, Ceiling: 10 * MiB}); got != 5*MiB {
		t.Fatalf("7ms against a 6ms target: %d", got)
	}
	if got := c.target(); got != 6*time.Millisecond {
		t.Fatalf("an interval with background work moved the target to %v", got)
	}
}

// The bucket lets a tenth of a second of the rate through at once, then paces.
func TestReserve(t *testing.T) {
	b := New(Config{Ceiling: 10 * MiB})
	t0 := time.Unix(1000, 0)
	if d := b.reserve(MiB, t0); d != 0 {
		t.Fatalf("first MiB waits %v", d)
	}
	if d := b.reserve(MiB, t0); d != 100*time.Millisecond {
		t.Fatalf("second MiB at once waits %v, want 100ms", d)
	}
	if d := b.reserve(MiB, t0.Add(time.Second)); d != 0 {
		t.Fatalf("after a second: %v", d)
	}
	b.SetCeiling(0)
	b.rate.Store(0)
	if d := b.reserve(1<<30, t0.Add(2*time.Second)); d != 0 {
		t.Fatalf("unlimited waits %v", d)
	}
	b.SetCeiling(5 * MiB)
	if b.Rate() != 5*MiB {
		t.Fatalf("a lower ceiling is not in force at once: %d", b.Rate())
	}
}

// Step reads the client latencies and the background bytes of the interval.
func TestBudgetStep(t *testing.T) {
	b := New(Config{Ceiling: 64 * MiB, Controller: Controller{Target: 10 * time.Millisecond}})
	for range 1000 {
		b.ObserveClient(50*time.Millisecond, 4096)
	}
	b.ObserveClient(time.Hour, 1<<30) // a large transfer: not counted
	b.reserve(8*MiB, time.Now())
	in := b.step(500 * time.Millisecond)
	if in.ClientOps != 1000 || in.ClientP99 < 50*time.Millisecond || in.ClientP99 > 100*time.Millisecond || in.Background != 8*MiB {
		t.Fatalf("input %+v", in)
	}
	if b.Rate() != 8*MiB { // moved 16 MiB/s, halved
		t.Fatalf("rate %d after a loaded interval", b.Rate())
	}
	in = b.step(500 * time.Millisecond)
	if in.ClientOps != 0 || b.Rate() != 64*MiB {
		t.Fatalf("quiet interval: %+v, rate %d", in, b.Rate())
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for i := range 1000 {
		d := time.Millisecond
		if i%100 == 0 {
			d = time.Second // 1 %: not in the 99th percentile
		}
		h.add(d)
	}
	n, p99 := h.take()
	if n != 1000 || p99 < time.Millisecond || p99 > 2*time.Millisecond {
		t.Fatalf("take = %d, %v", n, p99)
	}
	if n, _ := h.take(); n != 0 {
		t.Fatal("take did not start over")
	}
}
