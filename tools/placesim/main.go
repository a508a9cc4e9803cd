// Command placesim simulates placement and recovery at scale with cairn's own map and
// placement code: cluster maps are built and changed with clustermap.ApplyCommand (init,
// add_node, set_state out, as the managers apply them) and placed with
// topology.Layout, which calls placement.NewVersion with the map's placement version
// (--placement: v1 weighted rendezvous, v2 bounded load) exactly as every gateway and
// storage node does. Nothing of placement is re-implemented here; only the figures are
// computed. --epsilon explores other load bounds than version 2's by calling
// placement.NewBounded on the map's placement nodes instead.
//
// For each cluster (--nodes, with --zones zones, node i in zone i mod zones, capacities
// drawn at random from --capacities, one host per node) it reports:
//
//   - the time to compute the placement table (once per map change, on every node);
//   - balance: each node's partition copies over its capacity share of all copies, the
//     largest and smallest (max/mean, min/mean; 1.00 is perfect);
//   - zone-rule violations: partitions with two copies in one zone although there are at
//     least N zones (also host violations and partitions short of N nodes);
//   - a join (one node of --join-tb): copies created, as a fraction of all P·N copies,
//     against the lower bound (the new node's weight share; 1/(n+1) for equal nodes), and
//     how many landed on nodes other than the new one;
//   - a loss (the first node of --lost-tb capacity, set out): copies created against the
//     copies it held, and the time to re-protect its --lost-tb bytes.
//
// The re-protection model: the lost node's bytes are spread evenly over the partition
// copies it held. Each such partition gets one new holder (the receiver), and its
// surviving holders (the co-holders: the nodes that shared a partition with the lost
// node) can send it. Times are at --rate bytes per second per node:
//
//   - single: one node copies everything (the naive figure);
//   - senders: each partition's bytes are split evenly over its surviving holders, each
//     sending at the rate; the busiest co-holder sets the time;
//   - pull: what cairn's sync does today: each new holder pulls its partitions, paced to
//     its own recovery rate, and senders are not throttled; the busiest receiver sets
//     the time;
//   - pull, lowest-ID: the same, but cairn's sync copies each object from the first peer
//     in ID order that has it (repair.pullNewer), so if senders were limited to the rate
//     too, the busiest lowest-ID co-holder could set the time.
//
// Usage:
//
//	GOMAXPROCS=1 go run ./tools/placesim [--nodes 100,1000,5000] [--zones 3,5,10]
//	    [--per-node 100 | --partitions P] [--replicas 3] [--weights one,capacity,calibrated]
//	    [--capacities 50,100,100,200] [--lost-tb 100] [--join-tb 100] [--rate 64MiB]
//	    [--placement v1,v2] [--epsilon 0.05,0.1] [--joins 1] [--seed 1] [--events=false] [--participants] [--cpuprofile FILE]
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "placesim:", err)
		os.Exit(1)
	}
}

// run runs the command with args, writing the report to w and progress to logw.
func run(args []string, w, logw io.Writer) error {
	fs := flag.NewFlagSet("placesim", flag.ContinueOnError)
	nodes := fs.String("nodes", "100,1000,5000", "cluster sizes, comma separated")
	zones := fs.String("zones", "", "zones per cluster: one value, or one per cluster size (default 3 up to 100 nodes, 5 up to 1000, else 10)")
	perNode := fs.String("per-node", "100", "partitions per node: P = per-node × nodes (ignored with --partitions); a list runs each")
	parts := fs.Int("partitions", 0, "a fixed partition count for every cluster (cairn's default is 4096)")
	replicas := fs.Int("replicas", 3, "copies per partition (N of STANDARD)")
	weights := fs.String("weights", "one,capacity,calibrated", "weight modes: one (cairn today), capacity, calibrated")
	capList := fs.String("capacities", "50,100,100,200", "node capacities in TB, drawn uniformly per node")
	lostTB := fs.Float64("lost-tb", 100, "TB held by the lost node (the first node of the closest capacity)")
	joinTB := fs.Float64("join-tb", 100, "capacity of the joining node in TB")
	joins := fs.Int("joins", 1, "how many different nodes join, each alone (the mean and worst movement are reported)")
	rate := fs.String("rate", "64MiB", "per-node recovery rate in bytes per second (cairn's default 64MiB)")
	seed := fs.Uint64("seed", 1, "seed of the capacity draw")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	participants := fs.Bool("participants", false, "list the nodes that take part in each re-protection (receivers and co-holders, with their copies)")
	placements := fs.String("placement", "v1", "placement versions of the maps, comma separated: v1 (weighted rendezvous), v2 (bounded load)")
	epsilon := fs.String("epsilon", "", "exploration: load bounds to try with placement.NewBounded instead of the map's version, comma separated")
	events := fs.Bool("events", true, "simulate the join and the loss (false: the initial placement only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ns, err := ints(*nodes)
	if err != nil {
		return fmt.Errorf("--nodes: %w", err)
	}
	var zs []int
	if *zones == "" {
		for _, n := range ns {
			zs = append(zs, autoZones(n))
		}
	} else if zs, err = ints(*zones); err != nil {
		return fmt.Errorf("--zones: %w", err)
	}
	pns, err := ints(*perNode)
	if err != nil {
		return fmt.Errorf("--per-node: %w", err)
	}
	if len(zs) != 1 && len(zs) != len(ns) {
		return fmt.Errorf("--zones: %d values for %d cluster sizes", len(zs), len(ns))
	}
	var versions []int
	for _, f := range strings.Split(*placements, ",") {
		switch strings.TrimSpace(f) {
		case "v1":
			versions = append(versions, 1)
		case "v2":
			versions = append(versions, 2)
		default:
			return fmt.Errorf("--placement: bad value %q (want v1 or v2)", f)
		}
	}
	var epss []float64
	if *epsilon != "" {
		for _, f := range strings.Split(*epsilon, ",") {
			e, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || e <= 0 {
				return fmt.Errorf("--epsilon: bad value %q", f)
			}
			epss = append(epss, e)
		}
		versions = []int{2}
	} else {
		epss = []float64{0}
	}
	var caps []float64
	for _, f := range strings.Split(*capList, ",") {
		c, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || c <= 0 {
			return fmt.Errorf("--capacities: bad value %q", f)
		}
		caps = append(caps, c)
	}
	bps, err := bytesValue(*rate)
	if err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	fmt.Fprintf(w, "placesim %s: GOMAXPROCS=%d, %s, replicas %d, capacities %s TB, rate %s/s per node\n\n",
		strings.Join(args, " "), runtime.GOMAXPROCS(0), runtime.Version(), *replicas, *capList, *rate)
	var results []*Result
	for i, n := range ns {
		z := zs[0]
		if len(zs) > 1 {
			z = zs[i]
		}
		for _, pn := range pns {
			p := *parts
			if p == 0 {
				p = pn * n
			}
			for _, mode := range strings.Split(*weights, ",") {
				for _, v := range versions {
					for _, e := range epss {
						s := Spec{Nodes: n, Zones: z, Replicas: *replicas, Partitions: p, Weights: strings.TrimSpace(mode),
							Capacities: caps, Seed: *seed, LostTB: *lostTB, JoinTB: *joinTB, Joins: *joins, Rate: bps, BalanceOnly: !*events,
							Placement: v, Epsilon: e}
						t0 := time.Now()
						r, err := Run(s)
						if err != nil {
							return fmt.Errorf("%d nodes, %s weights, %s: %w", n, mode, s.version(), err)
						}
						fmt.Fprintf(logw, "placesim: %d nodes, P %d, %s weights, %s done in %s\n", n, p, mode, s.version(), time.Since(t0).Round(time.Millisecond))
						results = append(results, r)
					}
				}
			}
			if *parts != 0 {
				break
			}
		}
	}
	report(w, results, *events)
	if *participants && *events {
		for _, r := range results {
			listParticipants(w, r)
		}
	}
	fmt.Fprintf(w, "\nrun time %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// report writes the results as two Markdown tables.
func report(w io.Writer, rs []*Result, events bool) {
	if !events {
		fmt.Fprintln(w, "| nodes | zones | P | copies/node | weights | placement | table time | max/mean | min/mean | zone viol. |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|")
		for _, r := range rs {
			s := r.Spec
			fmt.Fprintf(w, "| %d | %d | %d | %.0f | %s | %s | %s | %.3f | %.3f | %d |\n", s.Nodes, s.Zones, s.Partitions,
				r.CopiesMean, s.Weights, s.version(), dur(r.Build), r.MaxMean, r.MinMean, r.ZoneViolations+r.HostViolations+r.Short)
		}
		return
	}
	fmt.Fprintln(w, "| nodes | zones | P | copies/node | weights | placement | table time | max/mean | min/mean | zone viol. | joins | join moved (mean) | 1/(n+1) | bound | moved/bound mean | worst | not to new node | loss moved/held |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		s := r.Spec
		fmt.Fprintf(w, "| %d | %d | %d | %.0f | %s | %s | %s | %.3f | %.3f | %d | %d | %.4f%% | %.4f%% | %.4f%% | %.3f | %.3f | %d | %d/%d |\n",
			s.Nodes, s.Zones, s.Partitions, r.CopiesMean, s.Weights, s.version(), dur(r.Build), r.MaxMean, r.MinMean,
			r.ZoneViolations+r.HostViolations+r.Short, r.Joins, 100*r.JoinFrac, 100*r.JoinNPlus1, 100*r.JoinBound,
			r.JoinFrac/r.JoinBound, r.JoinWorst, r.JoinElsewhere, r.LossMoved, r.LostCopies)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| nodes | weights | placement | lost copies | receivers | max recv | co-holders | max even share | lowest-ID senders | max lowest-ID | single node | senders (even) | pull (cairn) | pull, lowest-ID | table time |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		rc := r.Recovery
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %d | %d | %.1f | %d | %d | %s | %s | %s | %s | %s |\n",
			r.Spec.Nodes, r.Spec.Weights, r.Spec.version(), r.LostCopies, rc.Receivers, rc.MaxRecv, rc.CoHolders, rc.MaxShare,
			rc.LowestID, rc.MaxLowest, dur(rc.Single), dur(rc.Senders), dur(rc.Pull), dur(rc.PullLoID), dur(r.LossBuild))
	}
}

// listParticipants writes the lost node and the nodes of its re-protection: the receivers
// with the lost copies each gets, the co-holders with the copies each sends under the
// even split, busiest first.
func listParticipants(w io.Writer, r *Result) {
	rc := r.Recovery
	fmt.Fprintf(w, "\n%d nodes, %s weights: lost %s (%d copies)\n", r.Spec.Nodes, r.Spec.Weights, r.LostID, r.LostCopies)
	for _, set := range []struct {
		name string
		m    map[string]float64
	}{{"receivers", rc.Recv}, {"co-holders", rc.Share}} {
		ids := make([]string, 0, len(set.m))
		for id := range set.m {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int {
			if c := cmp.Compare(set.m[b], set.m[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		fmt.Fprintf(w, "%s (%d):", set.name, len(ids))
		for _, id := range ids {
			fmt.Fprintf(w, " %s:%g", id, math.Round(set.m[id]*100)/100)
		}
		fmt.Fprintln(w)
	}
}

// version names s's placement in the tables: v1, v2, or the load bound explored.
func (s Spec) version() string {
	switch {
	case s.Epsilon != 0:
		return fmt.Sprintf("ε=%g", s.Epsilon)
	case s.Placement >= 2:
		return "v2"
	}
	return "v1"
}

// dur rounds d for a table: hours and minutes, minutes and seconds, or milliseconds.
func dur(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%.1f d", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
}

// autoZones is the default zone count of a cluster of n nodes.
func autoZones(n int) int {
	switch {
	case n <= 100:
		return 3
	case n <= 1000:
		return 5
	}
	return 10
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad value %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// bytesValue parses a byte count with an optional KiB, MiB, GiB, KB, MB or GB suffix.
func bytesValue(s string) (float64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad byte count %q", s)
	}
	return v * mult, nil
}
