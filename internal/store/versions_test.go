package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// A write as a replica receives it: an object version with its body, or a record
// without one (tombstone, delete marker, purge).
type vwrite struct {
	key  string
	rec  object.Object
	body []byte
	meta *object.MetaUpdate // an Object Lock change instead
}

func (w vwrite) apply(t *testing.T, s *Store) {
	t.Helper()
	if err := w.try(s); err != nil {
		t.Fatalf("apply %s %+v: %v", w.key, w.rec, err)
	}
}

func (w vwrite) try(s *Store) error {
	var err error
	switch {
	case w.meta != nil:
		_, err = s.UpdateMeta(*w.meta)
	case w.rec.Deleted:
		_, err = s.DeleteRecord("b", w.key, w.rec)
	default:
		meta := w.rec
		_, err = s.PutObject(context.Background(), "b", w.key, &meta, bytes.NewReader(w.body), int64(len(w.body)), object.PutOptions{Version: w.rec.HLC})
	}
	return err
}

// mver is a version of the reference model.
type mver struct {
	hlc       uint64
	locked    bool // under a COMPLIANCE retention
	versioned bool
	marker    bool
	body      []byte
}

// vmodel is S3's versioning, kept the obvious way: each key's versions newest first.
type vmodel map[string][]mver

// nullLocked reports whether key's null version is locked.
func (m vmodel) nullLocked(key string) bool {
	for _, v := range m[key] {
		if !v.versioned && v.locked {
			return true
		}
	}
	return false
}

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
	if testing.Short() || raceBuild {
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
				refused := false // Object Lock forbids it: the store must refuse, nothing changes
				switch op := rng.IntN(11); {
				case op == 10: // lock a version (COMPLIANCE, far ahead)
					vs := model[key]
					if len(vs) == 0 {
						continue
					}
					i := rng.IntN(len(vs))
					if vs[i].marker {
						continue
					}
					vs[i].locked = true
					w = vwrite{key: key, meta: &object.MetaUpdate{Bucket: "b", Key: key, Version: vs[i].hlc, MetaHLC: hlc,
						Retention: object.Retention{Mode: object.LockCompliance, Until: 1 << 62}, RetentionHLC: hlc}}
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
					w = vwrite{key: key, rec: object.Object{HLC: hlc, Versioned: mode == "enabled"}, body: body}
					if mode != "enabled" && model.nullLocked(key) {
						refused = true
						break
					}
					if mode != "enabled" {
						model.removeNull(key)
					}
					model[key] = append([]mver{{hlc: hlc, versioned: mode == "enabled", body: body}}, model[key]...)
				case op < 7: // delete
					if mode != "enabled" && model.nullLocked(key) {
						w, refused = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true, DeleteMarker: mode == "suspended"}}, true
						break
					}
					switch mode {
					case "never":
						w = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true}}
						model.removeNull(key)
					case "enabled":
						w = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true, DeleteMarker: true, Versioned: true}}
						model[key] = append([]mver{{hlc: hlc, versioned: true, marker: true}}, model[key]...)
					default:
						w = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true, DeleteMarker: true}}
						model.removeNull(key)
						model[key] = append([]mver{{hlc: hlc, marker: true}}, model[key]...)
					}
				default: // delete a version for good
					vs := model[key]
					if len(vs) == 0 {
						continue
					}
					v := vs[rng.IntN(len(vs))]
					switch {
					case v.locked && v.versioned:
						w, refused = vwrite{key: key, rec: object.Object{HLC: v.hlc, Deleted: true, Versioned: true, Purged: true}}, true
					case v.locked:
						w, refused = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true}}, true
					case v.versioned:
						w = vwrite{key: key, rec: object.Object{HLC: v.hlc, Deleted: true, Versioned: true, Purged: true}}
						model[key] = slices.DeleteFunc(vs, func(x mver) bool { return x.hlc == v.hlc })
					default:
						w = vwrite{key: key, rec: object.Object{HLC: hlc, Deleted: true}}
						model.removeNull(key)
					}
				}
				if refused {
					if err := w.try(a); !errors.IsErr(err, object.ErrLocked) {
						t.Fatalf("step %d: %s %+v of a locked version: %v, want ErrLocked", step, w.key, w.rec, err)
					}
					checkVersions(t, a, model, false)
					continue
				}
				w.apply(t, a)
				log = append(log, w)
				checkVersions(t, a, model, false)
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
					if err := w.try(b); err != nil && !(w.meta != nil && errors.Is(errors.NotExist, err)) {
						t.Fatalf("replay %s %+v: %v", w.key, w.rec, err) // a lock may come before any record of its key
					}
				}
				for _, w := range log { // a lock that arrived before its version comes again (anti-entropy)
					if w.meta != nil {
						w.apply(t, b)
					}
				}
				checkVersions(t, b, model, true)
			}
		})
	}
}

// checkVersions compares s's versions of bucket "b" with the model: the listing, the
// current records, every body, and the usage.
func checkVersions(t *testing.T, s *Store, model vmodel, paged bool) {
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
			if locked := rd.Object.Retention.Mode == object.LockCompliance; locked != v.locked {
				t.Fatalf("%s@%d: retention %+v, locked in the model: %v", k, v.hlc, rd.Object.Retention, v.locked)
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
	// Paged, the same (checked on the replayed stores: the listing code is the same).
	for _, page := range []int{1, 2, 3} {
		if !paged {
			break
		}
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

// TestVersionBound: a write of a version looks for a noncurrent record at its own version
// unless the version is above every V/ record's (versionBound), on a live store and after
// a reopen, whose count of the index reads the bound: a late copy of a purged version and
// a second delivery of a noncurrent version are still found, and new versions are kept.
func TestVersionBound(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	waitCounted(t, s)
	ver := func(h uint64, body string) vwrite {
		return vwrite{key: "k", rec: object.Object{HLC: h, Versioned: true}, body: []byte(body)}
	}
	purge := vwrite{key: "k", rec: object.Object{HLC: 50, Deleted: true, Versioned: true, Purged: true}}
	for _, w := range []vwrite{ver(10, "a"), ver(20, "b"), purge} {
		w.apply(t, s)
	}
	model := vmodel{"k": {{hlc: 20, versioned: true, body: []byte("b")}, {hlc: 10, versioned: true, body: []byte("a")}}}
	bound := func(when string, want uint64) {
		t.Helper()
		if !s.vbound.above(want+1) || s.vbound.above(want) {
			t.Fatalf("%s: the bound of V/ versions is %d (known %v), want %d", when, s.vbound.max.Load(), s.vbound.known.Load(), want)
		}
	}
	redeliver := func(when string) {
		t.Helper()
		for _, w := range []vwrite{ver(50, "late"), ver(10, "again")} {
			w.apply(t, s)
		}
		if o, err := s.StatAt("b", "k", 50); err != nil || !o.Purged {
			t.Fatalf("%s: version 50 after its late copy: %+v, %v; want the purge record", when, o, err)
		}
		checkVersions(t, s, model, false)
	}
	bound("live", 50)
	redeliver("live")

	// The count of the index finds the bound by itself.
	s.vbound.max.Store(0)
	s.vbound.known.Store(false)
	recount(t, s, func() {
		if s.vbound.above(11) {
			t.Fatal("the bound is known before the count read the index")
		}
	})
	bound("recounted", 50)

	s.Close()
	s = openStore(t, cfg)
	waitCounted(t, s)
	bound("reopened", 50)
	redeliver("reopened")
	ver(60, "c").apply(t, s)
	model["k"] = append([]mver{{hlc: 60, versioned: true, body: []byte("c")}}, model["k"]...)
	bound("after a new version", 50) // the version moved to V/ is 20, below the bound
	checkVersions(t, s, model, false)
}

// TestMovedRecordAsStored: a versioned write moves the current record it supersedes to
// V/ as it is stored, whatever the record's format (one of version 1, as the oldest
// binaries wrote it; a null version with tags; a version with a 4 KiB embedded body):
// the V/ value is the O/ value byte for byte, and it reads back as the version it was.
func TestMovedRecordAsStored(t *testing.T) {
	cfg := testConfig(t)
	cfg.InlineMax = 8 << 10
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	// A version-1 record: version 2 less its HLC (ModTime gives it), with an embedded body.
	v1 := func(body []byte, mod int64) []byte {
		rec := marshalRecord(&object.Object{Size: int64(len(body)), ModTime: mod, ETag: "e1", Inline: true, Embedded: true, Body: body})
		at := 2 + 16 + len(binary.AppendVarint(nil, int64(len(body)))) + len(binary.AppendVarint(nil, mod))
		if rec[0] != recordVersion || rec[at] != 0 {
			t.Fatalf("the version-2 record has no HLC of 0 at %d: %x", at, rec[:at+1])
		}
		rec[0] = 1
		return append(rec[:at:at], rec[at+1:]...)
	}
	mod := time.Unix(1_700_000_000, 0).UnixNano()
	for _, tc := range []struct {
		name  string
		write func(key string) // stores the record to be moved
		body  []byte
	}{
		{name: "v1", body: []byte("written by the oldest binaries"), write: func(key string) {
			if err := s.db.Set(objectKey("b", key), v1([]byte("written by the oldest binaries"), mod), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "null-tagged", body: []byte("null"), write: func(key string) {
			vwrite{key: key, rec: object.Object{HLC: 100, ModTime: mod, Tags: [][2]string{{"k", "v"}}}, body: []byte("null")}.apply(t, s)
		}},
		{name: "versioned-4KiB", body: randBytes(7, 4096), write: func(key string) {
			vwrite{key: key, rec: object.Object{HLC: 100, ModTime: mod, Versioned: true, ContentType: "text/x"}, body: randBytes(7, 4096)}.apply(t, s)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write(tc.name)
			okey := objectKey("b", tc.name)
			before, c, err := s.db.Get(okey)
			if err != nil {
				t.Fatal(err)
			}
			before = bytes.Clone(before)
			c.Close()
			old, err := s.StatVersion("b", tc.name)
			if err != nil {
				t.Fatal(err)
			}
			vwrite{key: tc.name, rec: object.Object{HLC: old.HLC + 1, Versioned: true}, body: []byte("new")}.apply(t, s)
			moved, c, err := s.db.Get(versionKey("b", tc.name, old.HLC))
			if err != nil {
				t.Fatalf("V/ record of version %d: %v", old.HLC, err)
			}
			defer c.Close()
			if !bytes.Equal(moved, before) {
				t.Errorf("V/ record %x, want the O/ record as it was, %x", moved, before)
			}
			o, err := s.StatAt("b", tc.name, old.HLC)
			if err != nil || o.ETag != old.ETag || o.Size != int64(len(tc.body)) || !slices.Equal(o.Tags, old.Tags) || o.Versioned != old.Versioned {
				t.Fatalf("version %d after the move: %+v, %v; want %+v", old.HLC, o, err, old)
			}
			r, err := s.OpenVersion("b", tc.name, old.HLC)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var buf bytes.Buffer
			if _, err := r.WriteRange(context.Background(), &buf, 0, r.Object.Size); err != nil || !bytes.Equal(buf.Bytes(), tc.body) {
				t.Errorf("body of version %d after the move: %q, %v; want %q", old.HLC, buf.Bytes(), err, tc.body)
			}
		})
	}
}
