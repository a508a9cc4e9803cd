package gateway

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

func lobj(key string, hlc uint64) object.ListEntry {
	return object.ListEntry{Key: key, Object: &object.Object{HLC: hlc, ETag: fmt.Sprintf("e%d", hlc)}}
}

func ltomb(key string, hlc uint64) object.ListEntry {
	return object.ListEntry{Key: key, Object: &object.Object{HLC: hlc, Deleted: true}}
}

// lres builds a replica answer; Next is its last entry, as a store sets it.
func lres(truncated bool, objs []object.ListEntry, cps ...string) *object.ListResult {
	r := &object.ListResult{Objects: objs, CommonPrefixes: cps, Truncated: truncated}
	for _, o := range objs {
		r.Next = max(r.Next, o.Key)
	}
	for _, p := range cps {
		r.Next = max(r.Next, p)
	}
	return r
}

func TestMergeList(t *testing.T) {
	type want struct {
		keys      []string
		hlcs      []uint64
		prefixes  []string
		truncated bool
		next      string
	}
	es := func(e ...object.ListEntry) []object.ListEntry { return e }
	cases := []struct {
		name string
		ress []*object.ListResult
		max  int
		want want
	}{
		{"empty", nil, 10, want{}},
		{"no answers with entries", []*object.ListResult{lres(false, nil), lres(false, nil)}, 10, want{}},
		{"union of disjoint answers",
			[]*object.ListResult{lres(false, es(lobj("a", 1), lobj("c", 1))), lres(false, es(lobj("b", 2), lobj("d", 2)))}, 10,
			want{keys: []string{"a", "b", "c", "d"}, hlcs: []uint64{1, 2, 1, 2}, next: "d"}},
		{"same key from every replica once",
			[]*object.ListResult{lres(false, es(lobj("a", 1))), lres(false, es(lobj("a", 1))), lres(false, es(lobj("a", 1)))}, 10,
			want{keys: []string{"a"}, hlcs: []uint64{1}, next: "a"}},
		{"newest HLC wins per key",
			[]*object.ListResult{lres(false, es(lobj("k", 5))), lres(false, es(lobj("k", 7))), lres(false, es(lobj("k", 6)))}, 10,
			want{keys: []string{"k"}, hlcs: []uint64{7}, next: "k"}},
		{"newer tombstone hides the key",
			[]*object.ListResult{lres(false, es(lobj("a", 1), lobj("b", 1), lobj("c", 1))), lres(false, es(lobj("a", 1), ltomb("b", 2), lobj("c", 1)))}, 10,
			want{keys: []string{"a", "c"}, hlcs: []uint64{1, 1}, next: "c"}},
		{"tombstone first then live: still hidden",
			[]*object.ListResult{lres(false, es(ltomb("b", 9))), lres(false, es(lobj("b", 3)))}, 10,
			want{}},
		{"older tombstone loses to a newer write",
			[]*object.ListResult{lres(false, es(lobj("k", 9))), lres(false, es(ltomb("k", 3)))}, 10,
			want{keys: []string{"k"}, hlcs: []uint64{9}, next: "k"}},
		{"truncated answer limits the page",
			[]*object.ListResult{
				lres(true, es(lobj("a", 1), lobj("b", 1), lobj("c", 1))),
				lres(false, es(lobj("a", 1), lobj("b", 1), lobj("c", 1), lobj("d", 1), lobj("e", 1))),
			}, 10,
			want{keys: []string{"a", "b", "c"}, hlcs: []uint64{1, 1, 1}, truncated: true, next: "c"}},
		{"smallest Next among truncated answers",
			[]*object.ListResult{
				lres(true, es(lobj("a", 1), lobj("c", 1), lobj("e", 1))),
				lres(true, es(lobj("b", 1), lobj("d", 1))),
				lres(false, es(lobj("a", 1), lobj("f", 1), lobj("g", 1))),
			}, 10,
			want{keys: []string{"a", "b", "c", "d"}, hlcs: []uint64{1, 1, 1, 1}, truncated: true, next: "d"}},
		{"page of tombstones up to the limit: empty, truncated, Next is the limit",
			[]*object.ListResult{
				lres(true, es(ltomb("a", 2), ltomb("b", 2))),
				lres(false, es(ltomb("a", 2), ltomb("b", 2), lobj("c", 1))),
			}, 10,
			want{truncated: true, next: "b"}},
		{"max respected",
			[]*object.ListResult{lres(false, es(lobj("a", 1), lobj("b", 1), lobj("c", 1), lobj("d", 1), lobj("e", 1)))}, 3,
			want{keys: []string{"a", "b", "c"}, hlcs: []uint64{1, 1, 1}, truncated: true, next: "c"}},
		{"max reached exactly: not truncated if nothing live follows",
			[]*object.ListResult{lres(false, es(lobj("a", 1), lobj("b", 1), lobj("c", 1), ltomb("d", 2)))}, 3,
			want{keys: []string{"a", "b", "c"}, hlcs: []uint64{1, 1, 1}, next: "c"}},
		{"tombstones do not count towards max",
			[]*object.ListResult{lres(false, es(ltomb("a", 1), lobj("b", 1), ltomb("c", 1), lobj("d", 1), lobj("e", 1)))}, 2,
			want{keys: []string{"b", "d"}, hlcs: []uint64{1, 1}, truncated: true, next: "d"}},
		{"common prefixes merged with keys in order",
			[]*object.ListResult{
				lres(false, es(lobj("a", 1), lobj("y", 1)), "x/", "y/"),
				lres(false, es(lobj("a", 1), lobj("z", 1)), "y/", "z/"),
			}, 10,
			want{keys: []string{"a", "y", "z"}, hlcs: []uint64{1, 1, 1}, prefixes: []string{"x/", "y/", "z/"}, next: "z/"}},
		{"max counts common prefixes",
			[]*object.ListResult{lres(false, es(lobj("a", 1), lobj("c", 1)), "b/", "d/")}, 2,
			want{keys: []string{"a"}, hlcs: []uint64{1}, prefixes: []string{"b/"}, truncated: true, next: "b/"}},
		{"prefix past the limit left for the next page",
			[]*object.ListResult{lres(true, es(lobj("a", 1), lobj("b", 1))), lres(false, es(lobj("a", 1)), "c/")}, 10,
			want{keys: []string{"a", "b"}, hlcs: []uint64{1, 1}, truncated: true, next: "b"}},
		{"truncated at a common prefix",
			[]*object.ListResult{lres(true, es(lobj("a", 1)), "b/"), lres(false, es(lobj("a", 1), lobj("c", 1)), "b/")}, 10,
			want{keys: []string{"a"}, hlcs: []uint64{1}, prefixes: []string{"b/"}, truncated: true, next: "b/"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			page, truncated, next := mergeList(tc.ress, tc.max)
			var keys, prefixes []string
			var hlcs []uint64
			for _, e := range page.Objects {
				keys = append(keys, e.Key)
				hlcs = append(hlcs, e.Object.HLC)
				if e.Object.Deleted {
					t.Errorf("tombstone %q in the page", e.Key)
				}
			}
			prefixes = page.CommonPrefixes
			if !slices.Equal(keys, tc.want.keys) || !slices.Equal(hlcs, tc.want.hlcs) || !slices.Equal(prefixes, tc.want.prefixes) {
				t.Errorf("page: keys %q hlcs %v prefixes %q; want %q %v %q", keys, hlcs, prefixes, tc.want.keys, tc.want.hlcs, tc.want.prefixes)
			}
			if truncated != tc.want.truncated || next != tc.want.next {
				t.Errorf("truncated %v next %q; want %v %q", truncated, next, tc.want.truncated, tc.want.next)
			}
			if n := len(page.Objects) + len(page.CommonPrefixes); n > tc.max {
				t.Errorf("%d entries, max %d", n, tc.max)
			}
		})
	}
}

// TestListPaging lists 250 keys (some deleted normally, some deleted while one replica was
// down so that it still holds them live) in pages of 7, flat and with a delimiter, and
// checks that every live key and common prefix comes exactly once, in order.
func TestListPaging(t *testing.T) {
	for _, nodes := range []int{3, 4} {
		t.Run(fmt.Sprintf("nodes=%d", nodes), func(t *testing.T) {
			testListPaging(t, nodes)
		})
	}
}

func testListPaging(t *testing.T, nodes int) {
	ctx := context.Background()
	c := newCluster(t, nodes, clusterConfig{})
	c.createBucket("b")
	var keys []string
	for i := range 80 {
		keys = append(keys, fmt.Sprintf("a/%03d", i))
	}
	for i := range 60 {
		keys = append(keys, fmt.Sprintf("b/c/%03d", i), fmt.Sprintf("d-%03d", i))
	}
	for i := range 50 {
		keys = append(keys, fmt.Sprintf("t%03d", i))
	}
	if len(keys) != 250 {
		t.Fatal(len(keys))
	}
	live := map[string]bool{}
	// parallel runs op(i, keys[i]) for the given indexes with 8 workers.
	parallel := func(idx []int, op func(i int, k string) error) {
		work := make(chan int)
		errc := make(chan error, len(idx))
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					errc <- op(i, keys[i])
				}
			}()
		}
		for _, i := range idx {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	var all, dels []int
	for i, k := range keys {
		all = append(all, i)
		live[k] = true
		// Every fifth key deleted with all replicas up, and a whole run of neighbours so
		// that some replica pages hold nothing but tombstones.
		if i%5 == 0 || (i >= 100 && i < 130) {
			dels = append(dels, i)
			delete(live, k)
		}
	}
	parallel(all, func(i int, k string) error {
		_, err := put(ctx, c.nodes[i%nodes].gw, "b", k, []byte(k), int64(len(k)))
		return err
	})
	parallel(dels, func(i int, k string) error { return c.nodes[(i+1)%nodes].gw.DeleteObject(ctx, "b", k) })
	// A few deleted while the last node was down: it keeps them live. (Only keys whose
	// prefix keeps other live keys: see TestListDelimiterStaleReplica.)
	down := nodes - 1
	c.stop(down)
	for _, k := range []string{"a/001", "a/002", "a/033", "t001", "t002", "t049", "d-059"} {
		if err := c.nodes[0].gw.DeleteObject(ctx, "b", k); err != nil {
			t.Fatal(err)
		}
		delete(live, k)
	}
	c.restart(down)

	cases := []object.ListOptions{
		{Max: 7},
		{Max: 7, Delimiter: "/"},
		{Max: 7, Prefix: "a/"},
		{Max: 7, Prefix: "b/", Delimiter: "/"},
		{Max: 7, Prefix: "t", Delimiter: "/"},
		{Max: 7, After: "b/c/050"},
		{Max: 7, After: "a/", Delimiter: "/"},
		{Max: 1, Delimiter: "/"},
		{Max: 1000, Delimiter: "/"},
	}
	for _, opts := range cases {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			wantKeys, wantPrefixes := modelList(live, opts)
			// Through a node that was up all along and through the one that was down.
			for _, i := range []int{0, down} {
				gotKeys, gotPrefixes := listKeys(t, c.nodes[i].gw, "b", opts)
				if !slices.Equal(gotKeys, wantKeys) {
					t.Errorf("via %s: %d keys, want %d\n got %q\nwant %q", c.nodes[i].id, len(gotKeys), len(wantKeys), gotKeys, wantKeys)
				}
				if !slices.Equal(gotPrefixes, wantPrefixes) {
					t.Errorf("via %s: prefixes %q, want %q", c.nodes[i].id, gotPrefixes, wantPrefixes)
				}
			}
		})
	}
}

// modelList is what a listing of the live keys with opts must return, in order.
func modelList(live map[string]bool, opts object.ListOptions) (keys, prefixes []string) {
	seen := map[string]bool{}
	for k := range live {
		if !strings.HasPrefix(k, opts.Prefix) {
			continue
		}
		if opts.Delimiter != "" {
			if i := strings.Index(k[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				cp := k[:len(opts.Prefix)+i+len(opts.Delimiter)]
				if cp > opts.After && !seen[cp] {
					seen[cp] = true
					prefixes = append(prefixes, cp)
				}
				continue
			}
		}
		if k > opts.After {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	sort.Strings(prefixes)
	return keys, prefixes
}
