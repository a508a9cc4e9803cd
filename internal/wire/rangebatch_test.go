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

func encodeBatch(ws []object.RangeWrite) []byte {
	b := AppendRangeBatchHead(nil, len(ws))
	for i := range ws {
		b = AppendRangeWriteHead(b, &ws[i])
		b = append(b, ws[i].Data...)
	}
	return b
}

var batchTests = []struct {
	name string
	ws   []object.RangeWrite
}{
	{"one write", []object.RangeWrite{{Bucket: "_volumes", Key: "00000000000000aa/0000000000000001", Size: 4 << 20, Off: 4096, Data: []byte("hello"), Prev: 1 << 40, Next: 1<<40 + 1}}},
	{"a hole and unsynced writes", []object.RangeWrite{
		{Bucket: "_volumes", Key: "a/0", Size: 1 << 20, Off: 0, Len: 1 << 20, Prev: 7, Next: 8},
		{Bucket: "_volumes", Key: "a/1", Size: 1 << 20, Off: 100, Data: bytes.Repeat([]byte{9}, 5000), Prev: 0, Next: 1, Unsynced: true},
		{Bucket: "_volumes", Key: "a/1", Size: 1 << 20, Off: 1<<20 - 1, Data: []byte{1}, Prev: 1, Next: 2, Unsynced: true},
	}},
	{"the largest names", []object.RangeWrite{{Bucket: strings.Repeat("b", maxBatchBucket), Key: strings.Repeat("k", maxBatchKey), Size: 1, Data: []byte{0}, Next: 1}}},
}

// TestRangeBatchRoundTrip: what is encoded decodes to the same writes, and the checked
// bounds hold.
func TestRangeBatchRoundTrip(t *testing.T) {
	for _, tc := range batchTests {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckRangeBatch(tc.ws); err != nil {
				t.Fatal(err)
			}
			got, err := DecodeRangeBatch(encodeBatch(tc.ws))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.ws) {
				t.Fatalf("decoded %+v, want %+v", got, tc.ws)
			}
		})
	}
}

// TestRangeBatchRefused: a body that is not whole, has bytes after its last write, a
// wrong version, count or flag, or breaks a bound is refused as a whole.
func TestRangeBatchRefused(t *testing.T) {
	good := encodeBatch(batchTests[1].ws)
	big := []object.RangeWrite{{Bucket: "b", Key: "k", Size: 16 << 20, Data: make([]byte, MaxRangeBatchData/2+1), Next: 1},
		{Bucket: "b", Key: "l", Size: 16 << 20, Data: make([]byte, MaxRangeBatchData/2+1), Next: 1}}
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
		{"another version", set(good, 3, 2), errors.Invalid},
		{"no writes", count(0), errors.Invalid},
		{"more writes than it holds", count(4), errors.Invalid},
		{"more writes than allowed", count(MaxRangeBatchWrites + 1), errors.Invalid},
		{"cut short", good[:len(good)-1], errors.Invalid},
		{"cut in a header", good[:20], errors.Invalid},
		{"bytes after the last write", append(bytes.Clone(good), 0), errors.Invalid},
		{"unknown flag", set(good, 8, 4), errors.Invalid},
		{"too much data", encodeBatch(big), errors.TooLarge},
		{"too large a body", make([]byte, MaxRangeBatchBody+1), errors.TooLarge},
		{"zero length", encodeBatch([]object.RangeWrite{{Bucket: "b", Key: "k", Size: 1, Len: 0, Next: 1}}), errors.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := DecodeRangeBatch(tc.body)
			if errors.KindOf(err) != tc.kind || ws != nil {
				t.Fatalf("decoded %d writes, err %v; want kind %v", len(ws), err, tc.kind)
			}
		})
	}
	if err := CheckRangeBatch(big); !errors.Is(errors.TooLarge, err) {
		t.Fatalf("check of too much data: %v", err)
	}
	if err := CheckRangeBatch(nil); !errors.Is(errors.Invalid, err) {
		t.Fatalf("check of no writes: %v", err)
	}
}

// TestRangeResults: a result carries a record or an error's kind, sentinel and message.
func TestRangeResults(t *testing.T) {
	o := &object.Object{HLC: 1<<40 + 3, Size: 4 << 20, Mutable: true}
	got, err := RangeResultOf(o, nil).Outcome()
	if err != nil || got.HLC != o.HLC || !got.Mutable {
		t.Fatalf("record: %+v, %v", got, err)
	}
	for _, k := range []errors.Kind{errors.Precondition, errors.Permission, errors.Transient, errors.NoSpace, errors.Other} {
		_, err := RangeResultOf(nil, errors.E(k, "refused")).Outcome()
		if errors.KindOf(err) != k || !strings.Contains(err.Error(), "refused") {
			t.Errorf("kind %v: %v", k, err)
		}
	}
	_, err = RangeResultOf(nil, errors.E(errors.NotExist, object.ErrNoSuchBucket)).Outcome()
	if !errors.IsErr(err, object.ErrNoSuchBucket) {
		t.Errorf("sentinel lost: %v", err)
	}
	if _, err := (RangeResult{}).Outcome(); err == nil {
		t.Error("an empty result is no error")
	}
	if _, err := (RangeResult{Code: 999, Error: "new"}).Outcome(); !errors.Is(errors.IO, err) {
		t.Errorf("an unknown code: %v", err)
	}
}

// FuzzRangeBatch: no body makes the decoder panic or return writes that break the
// bounds, and what it accepts encodes back to the same bytes.
func FuzzRangeBatch(f *testing.F) {
	for _, tc := range batchTests {
		f.Add(encodeBatch(tc.ws))
	}
	f.Add([]byte("CRB\x01\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ws, err := DecodeRangeBatch(b)
		if err != nil {
			return
		}
		if len(ws) == 0 || len(ws) > MaxRangeBatchWrites {
			t.Fatalf("%d writes accepted", len(ws))
		}
		if err := CheckRangeBatch(ws); err != nil {
			t.Fatalf("accepted writes fail the check: %v", err)
		}
		if again := encodeBatch(ws); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differently:\n%x\n%x", again, b)
		}
	})
}
