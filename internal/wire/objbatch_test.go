package wire

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

func encodeObjectBatch(ws []ObjectWrite) []byte {
	b := AppendObjectBatchHead(nil, len(ws))
	for i := range ws {
		b = AppendObjectWrite(b, &ws[i])
	}
	return b
}

var objectBatchTests = []struct {
	name string
	ws   []ObjectWrite
}{
	{"one write", []ObjectWrite{{Bucket: "photos", Key: "a/b.jpg", Version: 1 << 50, ModTime: 1764000000000000000,
		Meta: EncodeMeta(&object.Object{Size: 5, ContentType: "image/jpeg"}), Final: EncodeMeta(&object.Object{Size: 5, ETag: "e"}), Body: []byte("hello")}}},
	{"flags and an empty body", []ObjectWrite{
		{Bucket: "b", Key: "k1", Version: 7, ModTime: 1, Meta: `{"size":0}`, Final: `{"size":0}`, Repair: true},
		{Bucket: "b", Key: "k2", Version: 8, ModTime: 2, Meta: `{"size":3}`, Final: `{"size":3}`, Body: []byte{1, 2, 3}, IfAbsent: true},
		{Bucket: "b", Key: "k2", Version: 9, ModTime: -3, Meta: `{}`, Final: `{}`, Body: bytes.Repeat([]byte{9}, 5000)},
	}},
	{"the largest names", []ObjectWrite{{Bucket: strings.Repeat("b", maxBatchBucket), Key: strings.Repeat("k", maxBatchKey), Meta: "m", Final: "f", Body: []byte{0}}}},
}

// TestObjectBatchRoundTrip: what is encoded decodes to the same writes, and the checked
// bounds hold.
func TestObjectBatchRoundTrip(t *testing.T) {
	for _, tc := range objectBatchTests {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckObjectBatch(tc.ws); err != nil {
				t.Fatal(err)
			}
			got, err := DecodeObjectBatch(encodeObjectBatch(tc.ws))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.ws) {
				t.Fatalf("decoded %+v, want %+v", got, tc.ws)
			}
		})
	}
}

// TestObjectBatchRefused: a body that is not whole, has bytes after its last write, a
// wrong version, count or flag, a write without its metadata, or breaks a bound is
// refused as a whole.
func TestObjectBatchRefused(t *testing.T) {
	good := encodeObjectBatch(objectBatchTests[1].ws)
	half := make([]byte, MaxObjectBatchData/2)
	big := []ObjectWrite{{Bucket: "b", Key: "k", Meta: "m", Final: "f", Body: half}, {Bucket: "b", Key: "l", Meta: "m", Final: "f", Body: half}}
	set := func(b []byte, at int, v byte) []byte {
		b = bytes.Clone(b)
		b[at] = v
		return b
	}
	count := func(n uint32) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint32(b[4:8], n)
		return b
	}
	for _, tc := range []struct {
		name string
		body []byte
		kind errors.Kind
	}{
		{"empty", nil, errors.Invalid},
		{"not a batch", []byte("GET / HTTP/1.1\r\n"), errors.Invalid},
		{"a range batch", encodeBatch(batchTests[0].ws), errors.Invalid},
		{"another version", set(good, 3, 2), errors.Invalid},
		{"no writes", count(0), errors.Invalid},
		{"more writes than it holds", count(4), errors.Invalid},
		{"more writes than allowed", count(MaxObjectBatchWrites + 1), errors.Invalid},
		{"cut short", good[:len(good)-1], errors.Invalid},
		{"cut in a header", good[:20], errors.Invalid},
		{"bytes after the last write", append(bytes.Clone(good), 0), errors.Invalid},
		{"unknown flag", set(good, 8, 4), errors.Invalid},
		{"too much data", encodeObjectBatch(big), errors.TooLarge},
		{"too large a body", make([]byte, MaxObjectBatchBody+1), errors.TooLarge},
		{"no bucket", encodeObjectBatch([]ObjectWrite{{Key: "k", Meta: "m", Final: "f"}}), errors.Invalid},
		{"no record", encodeObjectBatch([]ObjectWrite{{Bucket: "b", Key: "k", Final: "f"}}), errors.Invalid},
		{"no final metadata", encodeObjectBatch([]ObjectWrite{{Bucket: "b", Key: "k", Meta: "m"}}), errors.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := DecodeObjectBatch(tc.body)
			if errors.KindOf(err) != tc.kind || ws != nil {
				t.Fatalf("decoded %d writes, err %v; want kind %v", len(ws), err, tc.kind)
			}
		})
	}
	for _, tc := range []struct {
		name string
		ws   []ObjectWrite
		kind errors.Kind
	}{
		{"none", nil, errors.Invalid},
		{"too many", make([]ObjectWrite, MaxObjectBatchWrites+1), errors.Invalid},
		{"too much data", big, errors.TooLarge},
		{"no record", []ObjectWrite{{Bucket: "b", Key: "k", Final: "f"}}, errors.Invalid},
	} {
		if err := CheckObjectBatch(tc.ws); errors.KindOf(err) != tc.kind {
			t.Errorf("check of %s: %v, want kind %v", tc.name, err, tc.kind)
		}
	}
}

// FuzzObjectBatch: no body makes the decoder panic or return writes that break the
// bounds, and what it accepts encodes back to the same bytes.
func FuzzObjectBatch(f *testing.F) {
	for _, tc := range objectBatchTests {
		f.Add(encodeObjectBatch(tc.ws))
	}
	f.Add([]byte("COB\x01\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ws, err := DecodeObjectBatch(b)
		if err != nil {
			return
		}
		if len(ws) == 0 || len(ws) > MaxObjectBatchWrites {
			t.Fatalf("%d writes accepted", len(ws))
		}
		if err := CheckObjectBatch(ws); err != nil {
			t.Fatalf("accepted writes fail the check: %v", err)
		}
		if again := encodeObjectBatch(ws); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differently:\n%x\n%x", again, b)
		}
	})
}
