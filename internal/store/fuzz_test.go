package store

import (
	"bytes"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// FuzzObjectRecord feeds arbitrary bytes to the object-record decoder: it must never panic,
// and whatever it accepts must re-encode to the same bytes.
func FuzzObjectRecord(f *testing.F) {
	seeds := []*object.Object{
		{},
		{Size: 5, ETag: "abc", ContentType: "text/plain", Inline: true, UserMeta: [][2]string{{"a", "b"}}},
		{Size: 1 << 30, Chunks: []object.Chunk{{Size: 4 << 20}, {ID: object.ChunkID{1}, Size: 17}}, PartSizes: []int64{5 << 20, 17}, ChecksumAlgo: "CRC32C", Checksum: "AAAAAA=="},
		{Size: 9 << 20, Inline: true, Embedded: true, Body: []byte{}, Striped: true, Stripe: object.Stripe{K: 4, M: 2, Size: 4 << 20}, StorageClass: "EC42"},
		{HLC: 3, MetaHLC: 4, Size: 1, Inline: true, Embedded: true, Body: []byte{1}, Tags: [][2]string{{"k", "v"}}},
		{Size: 9 << 20, Striped: true, Stripe: object.Stripe{K: 4, M: 2, Size: 4 << 20}, MetaHLC: 9, Tags: [][2]string{{"a", ""}}},
		{HLC: 5, Deleted: true, Versioned: true, DeleteMarker: true, Inline: true, Embedded: true, Body: []byte{}},
		{HLC: 6, Deleted: true, Versioned: true, Purged: true, Inline: true, Embedded: true, Body: []byte{}},
		{HLC: 7, MetaHLC: 12, TagsHLC: 9, RetentionHLC: 12, HoldHLC: 11, LegalHold: true, Versioned: true, Size: 1, Inline: true, Embedded: true, Body: []byte{2},
			Retention: object.Retention{Mode: object.LockCompliance, Until: 1 << 62}, Tags: [][2]string{{"k", "v"}}},
		{HLC: 8, Owner: "u", ACL: "public-read", ACLHLC: 9, MetaHLC: 9, SSE: object.Encryption{Algorithm: "AES256", KeyID: "k", SealedKey: []byte{1}, PlainSize: 1},
			Size: 17, Inline: true, Embedded: true, Body: make([]byte, 17)},
	}
	for _, o := range seeds {
		f.Add(marshalRecord(o))
	}
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var o object.Object
		if err := unmarshalRecord(&o, b); err != nil {
			return
		}
		if again := marshalRecord(&o); !bytes.Equal(again, b) {
			// Varints have one canonical encoding in Marshal; non-canonical input may decode.
			var o2 object.Object
			if err := unmarshalRecord(&o2, again); err != nil {
				t.Fatalf("re-encoded record does not decode: %v", err)
			}
		}
	})
}

// FuzzSegmentHeader checks the record header decoder on arbitrary bytes.
func FuzzSegmentHeader(f *testing.F) {
	var hdr [segment.HeaderSize]byte
	segment.EncodeHeader(hdr[:], segment.KindChunk, segment.ID{7}, []byte("payload"))
	f.Add(hdr[:])
	f.Add(make([]byte, segment.HeaderSize))
	f.Add([]byte{0x61, 0x5e, 0x1f, 0xca})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := segment.DecodeHeader(b)
		if err != nil {
			return
		}
		if h.Len > segment.MaxPayload {
			t.Fatalf("accepted length %d", h.Len)
		}
		var re [segment.HeaderSize]byte
		copy(re[:], b)
		if _, err := segment.DecodeHeader(re[:]); err != nil {
			t.Fatal(err)
		}
	})
}
