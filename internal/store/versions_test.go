package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// A write as a replica receives it: an object version with its body, or a record
// without one (tombstone, delete marker, purge).
type vwrite struct {
	key  string
	rec  object.Object
	body []byte
}

func (w vwrite) apply(t *testing.T, s *Store) {
	t.Helper()
	var err error
	if w.rec.Deleted {
		_, err = s.DeleteRecord("b", w.key, w.rec)
	} else {
		meta := w.rec
		_, err = s.PutObject(context.Background(), "b", w.key, &meta, bytes.NewReader(w.body), int64(len(w.body)), object.PutOptions{Version: w.rec.HLC})
	}
	if err != nil {
		t.Fatalf("apply %s %+v: %v", w.key, w.rec, err)
	}
}

// mver is a version of the reference model.
type mver struct {
	hlc       uint64
	versioned bool
	marker    bool
	body      []byte
}

// vmodel is S3's versioning, kept the obvious way: each key's versions newest first.
type vmodel map[string][]mver

func (m vmodel) removeNull(key string) {
	m[key] = slices.DeleteFunc(m[key], func(v mver) bool { return !v.versioned })
}

// TestVersionsModel runs random sequences of puts, deletes and permanent deletes of
// versions, with versioning never enabled, enabled and suspended, against a reference
// model; then applies each sequence's writes to other stores in a random order, some
// twice (replicas receive writes late, out of order and again): every store ends with
// the same versions, bodies and usage.
func TestVersionsModel(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			a := openStore(t, testConfig(t))
			if err := a.CreateBucket("b"); err != nil {
				t.Fatal(err)
			}
			model := vmodel{}
			var log []vwrite
			mode := "never" // "enabled", "suspended"
			hlc := uint64(1000)
			keys := []string{"k0", "k1", "k1/x", "k2"}
			for step := 0; step < 60; step++ {
				key := keys[rng.IntN(len(keys))]
				hlc += uint64(1 + rng.IntN(3))
				var w vwrite
				switch op := rng.IntN(10); {
				case op < 1:
					if mode == "enabled" {
						mode = "suspended"
					} else {
						mode = "enabled"
					}
					continue
				case op < 5: // put
					n := rng.IntN(40)
					if rng.IntN(4) == 0 {
						n = 9<<10 + rng.IntN(300<<10)
					}
					body := make([]byte, n)
					for i := range body {
						body[i] = byte(rng.Uint32())
					}
					w = vwrite{key, object.Object{HLC: hlc, Versioned: mode == "enabled"}, body}
					if mode != "enabled" {
						model.removeNull(key)
					}
					model[key] = append([]mver{{hlc, mode == "enabled", false, body}}, model[key]...)
				case op < 7: // delete
					switch mode {
					case "never":
						w = vwrite{key, object.Object{HLC: hlc, Deleted: true}, nil}
						model.removeNull(key)
					case "enabled":
						w = vwrite{key, object.Object{HLC: hlc, Deleted: true, DeleteMarker: true, Versioned: true}, nil}
						model[key] = append([]mver{{hlc, true, true, nil}}, model[key]...)
					default:
						w = vwrite{key, object.Object{HLC: hlc, Deleted: true, DeleteMarker: true}, nil}
						model.removeNull(key)
						model[key] = append([]mver{{hlc, false, true, nil}}, model[key]...)
					}
				default: // delete a version for good
					vs := model[key]
					if len(vs) == 0 {
						continue
					}
					v := vs[rng.IntN(len(vs))]
					if v.versioned {
						w = vwrite{key, object.Object{HLC: v.hlc, Deleted: true, Versioned: true, Purged: true}, nil}
						model[key] = slices.DeleteFunc(vs, func(x mver) bool { return x.hlc == v.hlc })
					} else {
						w = vwrite{key, object.Object{HLC: hlc, Deleted: true}, nil}
						model.removeNull(key)
					}
				}
				w.apply(t, a)
				log = append(log, w)
				checkVersions(t, a, model)
			}
			for _, twice := range []bool{false, true} {
				b := openStore(t, testConfig(t))
				if err := b.CreateBucket("b"); err != nil {
					t.Fatal(err)
				}
				order := slices.Clone(log)
				if twice {
					order = append(order, log...)
				}
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				for _, w := range order {
					w.apply(t, b)
				}
				checkVersions(t, b, model)
			}
		})
	}
}

// checkVersions compares s's versions of bucket "b" with the model: the listing, the
// current records, every body, and the usage.
func checkVersions(t *testing.T, s *Store, model vmodel) {
	t.Helper()
	res, err := s.ListVersions("b", object.VersionListOptions{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, e := range res.Versions {
		got = append(got, fmt.Sprintf("%s@%d v=%v m=%v cur=%v", e.Key, e.Object.HLC, e.Object.Versioned, e.Object.DeleteMarker, e.Current))
	}
	var u Usage
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range model {
			if !yield(k) {
				return
			}
		}
	}) {
		for i, v := range model[k] {
			want = append(want, fmt.Sprintf("%s@%d v=%v m=%v cur=%v", k, v.hlc, v.versioned, v.marker, i == 0))
			switch {
			case v.marker:
			case i == 0:
				u.Objects++
				u.Bytes += int64(len(v.body))
			default:
				u.Noncurrent++
				u.NoncurrentBytes += int64(len(v.body))
			}
			if v.marker {
				rd, err := s.OpenVersion("b", k, v.hlc)
				if err != nil || !rd.Object.DeleteMarker {
					t.Fatalf("open of delete marker %s@%d: %v", k, v.hlc, err)
				}
				rd.Close()
				continue
			}
			rd, err := s.OpenVersion("b", k, v.hlc)
			if err != nil {
				t.Fatalf("open %s@%d: %v", k, v.hlc, err)
			}
			var buf bytes.Buffer
			if _, err := rd.WriteRange(context.Background(), &buf, 0, rd.Object.Size); err != nil || !bytes.Equal(buf.Bytes(), v.body) {
				t.Fatalf("body of %s@%d differs (%v)", k, v.hlc, err)
			}
			rd.Close()
		}
		cur, err := s.StatObject("b", k)
		switch {
		case len(model[k]) == 0 || model[k][0].marker:
			if !errors.Is(errors.NotExist, err) {
				t.Fatalf("%s: current is %+v, want none (%v)", k, cur, err)
			}
		case err != nil || cur.HLC != model[k][0].hlc:
			t.Fatalf("%s: current is %+v, want @%d (%v)", k, cur, model[k][0].hlc, err)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("versions:\n got %q\nwant %q", got, want)
	}
	// Paged, with and without hidden records, the same.
	for _, page := range []int{1, 2, 3} {
		var paged []string
		opts := object.VersionListOptions{Max: page}
		for {
			res, err := s.ListVersions("b", opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Versions {
				paged = append(paged, fmt.Sprintf("%s@%d v=%v m=%v cur=%v", e.Key, e.Object.HLC, e.Object.Versioned, e.Object.DeleteMarker, e.Current))
			}
			if !res.Truncated {
				break
			}
			opts.KeyMarker, opts.VersionMarker, opts.AfterNull = res.NextKey, res.NextVersion, false
			if res.NextNull && page == 2 {
				opts.VersionMarker, opts.AfterNull = 0, true // as S3 clients send it back: "null"
			}
		}
		if !slices.Equal(paged, want) {
			t.Fatalf("versions in pages of %d:\n got %q\nwant %q", page, paged, want)
		}
	}
	waitCounted(t, s)
	if g := s.Usage()["b"]; g != u {
		t.Fatalf("usage %+v, want %+v", g, u)
	}
}
