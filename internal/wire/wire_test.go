package wire

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// TestCodesStable pins the error codes: they are part of the protocol, so renumbering one
// (or reordering errors.Kind) must fail here, not misclassify errors between versions.
func TestCodesStable(t *testing.T) {
	want := []struct {
		kind errors.Kind
		code int
	}{
		{errors.Other, 0}, {errors.NotExist, 1}, {errors.Exist, 2}, {errors.Invalid, 3},
		{errors.Permission, 4}, {errors.IO, 5}, {errors.Transient, 6}, {errors.Corrupt, 7},
		{errors.NoSpace, 8}, {errors.Precondition, 9}, {errors.NotEmpty, 10}, {errors.TooLarge, 11},
	}
	for _, w := range want {
		if got := CodeOf(w.kind); int(got) != w.code {
			t.Errorf("code of %v = %d, want %d", w.kind, got, w.code)
		}
		if k, ok := Code(w.code).Kind(); !ok || k != w.kind {
			t.Errorf("kind of code %d = %v %v, want %v", w.code, k, ok, w.kind)
		}
	}
	if len(codes) != len(want) {
		t.Errorf("%d codes, %d pinned: pin the new one here", len(codes), len(want))
	}
	if _, ok := Code(99).Kind(); ok {
		t.Error("an unknown code is known")
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		value string
		ok    bool
		says  string
	}{
		{"1", true, ""},
		{"", false, "version 0"},
		{"0", false, "version 0"},
		{"2", false, "version 2"},
		{"x", false, "malformed"},
		{"-1", false, "malformed"},
	} {
		err := CheckVersion(tc.value)
		if (err == nil) != tc.ok {
			t.Errorf("CheckVersion(%q) = %v", tc.value, err)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "version 1")) {
			t.Errorf("CheckVersion(%q) = %q: should name %q and this node's version 1", tc.value, err, tc.says)
		}
	}
}

// notOnWire are the object.Object fields that describe how one store lays a version out,
// which the wire does not carry, and those it carries otherwise: Retention as lock_mode
// and lock_until, Bypass (a request flag) in the flags of a delete; Restore is what a
// gateway shows a HEAD of an archived version, never stored nor sent.
var notOnWire = map[string]bool{"VersionID": true, "Inline": true, "Body": true, "Embedded": true, "Chunks": true, "Retention": true, "Bypass": true, "Restore": true}

// TestMetaCarriesEveryField fails when object.Object gains a field the wire does not
// carry: add it to Meta (with a JSON name) or to notOnWire.
func TestMetaCarriesEveryField(t *testing.T) {
	mt := reflect.TypeOf(Meta{})
	for f := range reflect.TypeOf(object.Object{}).Fields() {
		if notOnWire[f.Name] {
			continue
		}
		mf, ok := mt.FieldByName(f.Name)
		if !ok {
			t.Errorf("object.Object.%s is not on the wire", f.Name)
			continue
		}
		if tag := mf.Tag.Get("json"); tag == "" || tag == "-" {
			t.Errorf("Meta.%s has no JSON name", f.Name)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, o := range []*object.Object{
		{},
		{HLC: 7, Size: 5, ModTime: 9, ETag: "e", ContentType: "text/plain", ContentEncoding: "gzip", ContentDisposition: "d",
			ContentLanguage: "en", CacheControl: "c", Expires: "x", StorageClass: "STANDARD", UserMeta: [][2]string{{"a", "b"}},
			ChecksumAlgo: "CRC32C", Checksum: "AAAAAA==", ChecksumType: "FULL_OBJECT", PartSizes: []int64{5, 6}, PartChecksums: []string{"AAAAAQ==", "AAAAAg=="}},
		{HLC: 8, Deleted: true},
		{HLC: 10, MetaHLC: 12, Tags: [][2]string{{"a", ""}, {"k", "v"}}},
		{Size: 9 << 20, Striped: true, Stripe: object.Stripe{K: 4, M: 2, Size: 4 << 20, Upload: "u", Parts: []int{1, 2}}},
		{HLC: 11, Owner: "alice", ACL: "public-read", ACLHLC: 12, MetaHLC: 12,
			SSE: object.Encryption{Algorithm: "AES256", KeyID: "k1", SealedKey: []byte{1, 2}, KeyMD5: "m", PlainSize: 3}},
		{HLC: 1<<40 | 3, Size: 4 << 20, Mutable: true},
		{HLC: 13, Size: 1, Origin: "c-0123456789abcdef"},
	} {
		got, err := DecodeMeta(EncodeMeta(o))
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Errorf("round trip of %+v = %+v, %v", o, got, err)
		}
	}
	// The layout fields stay home.
	o := &object.Object{Size: 3, Inline: true, Embedded: true, Body: []byte("abc"), Chunks: []object.Chunk{{Size: 3}}, VersionID: [16]byte{1}}
	got, _ := DecodeMeta(EncodeMeta(o))
	if got.Body != nil || got.Chunks != nil || got.Inline || got.Embedded || got.VersionID != ([16]byte{}) {
		t.Errorf("layout fields crossed the wire: %+v", got)
	}
	// The names are the protocol's.
	if s := EncodeMeta(&object.Object{HLC: 1, Size: 2, ETag: "e"}); s != `{"hlc":1,"size":2,"etag":"e"}` {
		t.Errorf("encoding %s", s)
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(`{"hlc":1,"size":2,"etag":"e"}`)
	f.Add(`{"striped":true,"stripe":{"k":4,"m":2,"size":100}}`)
	f.Add(`null`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, s string) {
		o, err := DecodeMeta(s)
		if err != nil {
			return
		}
		again, err := DecodeMeta(EncodeMeta(o))
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("re-encoded %q does not round trip: %+v %+v %v", s, o, again, err)
		}
	})
}
