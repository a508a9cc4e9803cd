package store

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// recordVersion 2 added HLC and the Deleted flag; version 1 records are still read (their
// HLC is derived from ModTime). Version 3 is version 2 plus a stripe layout; it is written
// only for striped records, so other records stay readable by version-2 binaries.
// Version 4 is version 3 (the stripe layout present iff flag 8 is set) plus, after the
// layout, the metadata of in-place changes: MetaHLC and the tag set, then the parts'
// checksums of a multipart object. It is written only for records with tags, a MetaHLC
// or part checksums, so every other record stays readable by binaries that know versions
// 2 and 3 (docs/design/tagging.md).
// Version 5 is version 4 plus, after the parts' checksums, the groups of in-place
// metadata Object Lock added (TagsHLC, the retention and its HLC, the legal hold and its
// HLC); it is written only for records with a retention, a legal hold or a change of
// them (docs/design/object-lock.md).
// Version 6 is version 5 plus, after the legal hold, the owner, the ACL and its HLC, and
// the encryption (algorithm, master key id, sealed data key, key MD5, plaintext size);
// it is written only for records with any of them, which a cluster makes only once every
// node runs feature level 5.
const (
	recordVersion        = 2
	recordVersionStriped = 3
	recordVersionMeta    = 4
	recordVersionLock    = 5
	recordVersionExt     = 6
)

// flagStriped marks a striped record in version 4 (versions 2 and 3 say it by the
// version byte).
const flagStriped = 8

// Versioning flags (docs/design/versioning.md), in records of every version: a binary
// that does not know them reads such a record as a null version, so buckets can have
// versioning enabled only once every node knows them (feature level 4).
const (
	flagVersioned = 16
	flagMarker    = 32
	flagPurged    = 64
)

// flagMutable marks a mutable object (mutable.go), whose bytes are extents: a binary that
// does not know it reads such a record as an empty object, so volumes exist only once
// every node knows it (the map's feature level).
const flagMutable = 128

// maxRecordList bounds list lengths in a record, so a corrupt record cannot make the decoder
// allocate without limit.
const maxRecordList = 1 << 22

// Marshal encodes o.
func marshalRecord(o *object.Object) []byte {
	n := 128 + len(o.Chunks)*20 + len(o.PartSizes)*5
	if o.Embedded {
		n += len(o.Body) // one allocation for a record with its body
	}
	b := make([]byte, 0, n)
	withExt := o.Owner != "" || o.ACL != "" || o.ACLHLC != 0 || !o.SSE.IsZero()
	withLock := withExt || o.RetentionHLC != 0 || o.HoldHLC != 0 || o.Retention != (object.Retention{}) || o.LegalHold
	withMeta := withLock || o.MetaHLC != 0 || len(o.Tags) > 0 || len(o.PartChecksums) > 0
	var flags byte
	switch {
	case withExt:
		b = append(b, recordVersionExt)
		if o.Striped {
			flags |= flagStriped
		}
	case withLock:
		b = append(b, recordVersionLock)
		if o.Striped {
			flags |= flagStriped
		}
	case withMeta:
		b = append(b, recordVersionMeta)
		if o.Striped {
			flags |= flagStriped
		}
	case o.Striped:
		b = append(b, recordVersionStriped)
	default:
		b = append(b, recordVersion)
	}
	if o.Inline {
		flags |= 1
	}
	if o.Embedded {
		flags |= 2
	}
	if o.Deleted {
		flags |= 4
	}
	if o.Versioned {
		flags |= flagVersioned
	}
	if o.DeleteMarker {
		flags |= flagMarker
	}
	if o.Purged {
		flags |= flagPurged
	}
	if o.Mutable {
		flags |= flagMutable
	}
	b = append(b, flags)
	b = append(b, o.VersionID[:]...)
	b = binary.AppendVarint(b, o.Size)
	b = binary.AppendVarint(b, o.ModTime)
	b = binary.AppendUvarint(b, o.HLC)
	for _, s := range []string{o.ETag, o.ContentType, o.ContentEncoding, o.ContentDisposition,
		o.ContentLanguage, o.CacheControl, o.Expires, o.StorageClass, o.ChecksumAlgo, o.Checksum, o.ChecksumType} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(o.UserMeta)))
	for _, kv := range o.UserMeta {
		b = appendString(b, kv[0])
		b = appendString(b, kv[1])
	}
	b = binary.AppendUvarint(b, uint64(len(o.Chunks)))
	for _, c := range o.Chunks {
		b = append(b, c.ID[:]...)
		b = binary.AppendUvarint(b, uint64(c.Size))
	}
	b = binary.AppendUvarint(b, uint64(len(o.PartSizes)))
	for _, s := range o.PartSizes {
		b = binary.AppendVarint(b, s)
	}
	if o.Striped {
		b = binary.AppendUvarint(b, uint64(o.Stripe.K))
		b = binary.AppendUvarint(b, uint64(o.Stripe.M))
		b = binary.AppendVarint(b, o.Stripe.Size)
		b = appendString(b, o.Stripe.Upload)
		b = binary.AppendUvarint(b, uint64(len(o.Stripe.Parts)))
		for _, n := range o.Stripe.Parts {
			b = binary.AppendUvarint(b, uint64(n))
		}
	}
	if withMeta {
		b = binary.AppendUvarint(b, o.MetaHLC)
		b = binary.AppendUvarint(b, uint64(len(o.Tags)))
		for _, kv := range o.Tags {
			b = appendString(b, kv[0])
			b = appendString(b, kv[1])
		}
		b = binary.AppendUvarint(b, uint64(len(o.PartChecksums)))
		for _, c := range o.PartChecksums {
			b = appendString(b, c)
		}
	}
	if withLock {
		b = binary.AppendUvarint(b, o.TagsHLC)
		b = appendString(b, o.Retention.Mode)
		b = binary.AppendVarint(b, o.Retention.Until)
		b = binary.AppendUvarint(b, o.RetentionHLC)
		hold := byte(0)
		if o.LegalHold {
			hold = 1
		}
		b = append(b, hold)
		b = binary.AppendUvarint(b, o.HoldHLC)
	}
	if withExt {
		b = appendString(b, o.Owner)
		b = appendString(b, o.ACL)
		b = binary.AppendUvarint(b, o.ACLHLC)
		b = appendString(b, o.SSE.Algorithm)
		b = appendString(b, o.SSE.KeyID)
		b = binary.AppendUvarint(b, uint64(len(o.SSE.SealedKey)))
		b = append(b, o.SSE.SealedKey...)
		b = appendString(b, o.SSE.KeyMD5)
		b = binary.AppendVarint(b, o.SSE.PlainSize)
	}
	if o.Embedded {
		b = binary.AppendUvarint(b, uint64(len(o.Body)))
		b = append(b, o.Body...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errors.E(errors.Op("store.Unmarshal"), errors.Corrupt, "malformed object record")
	}
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.fail()
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > math.MaxInt32 {
		d.fail()
		return ""
	}
	return string(d.bytes(int(n)))
}

func (d *decoder) count() int {
	n := d.uvarint()
	if n > maxRecordList || n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

// Unmarshal decodes a record made by Marshal. A malformed record is an error of kind Corrupt.
func unmarshalRecord(o *object.Object, b []byte) error {
	d := &decoder{b: b}
	v := d.bytes(2)
	if d.err != nil {
		return d.err
	}
	if v[0] < 1 || v[0] > recordVersionExt || (v[0] < recordVersionMeta && v[1]&flagStriped != 0) {
		d.fail()
		return d.err
	}
	striped := v[0] == recordVersionStriped || (v[0] >= recordVersionMeta && v[1]&flagStriped != 0)
	*o = object.Object{Inline: v[1]&1 != 0, Embedded: v[1]&2 != 0, Deleted: v[1]&4 != 0, Striped: striped,
		Versioned: v[1]&flagVersioned != 0, DeleteMarker: v[1]&flagMarker != 0, Purged: v[1]&flagPurged != 0, Mutable: v[1]&flagMutable != 0}
	copy(o.VersionID[:], d.bytes(16))
	o.Size = d.varint()
	o.ModTime = d.varint()
	if v[0] >= 2 {
		o.HLC = d.uvarint()
	} else if o.ModTime > 0 {
		o.HLC = hlc.FromTime(time.Unix(0, o.ModTime))
	}
	for _, p := range []*string{&o.ETag, &o.ContentType, &o.ContentEncoding, &o.ContentDisposition,
		&o.ContentLanguage, &o.CacheControl, &o.Expires, &o.StorageClass, &o.ChecksumAlgo, &o.Checksum, &o.ChecksumType} {
		*p = d.str()
	}
	if n := d.count(); n > 0 {
		o.UserMeta = make([][2]string, n)
		for i := range o.UserMeta {
			o.UserMeta[i] = [2]string{d.str(), d.str()}
		}
	}
	if n := d.count(); n > 0 {
		o.Chunks = make([]object.Chunk, n)
		for i := range o.Chunks {
			copy(o.Chunks[i].ID[:], d.bytes(16))
			s := d.uvarint()
			if s > segment.MaxPayload {
				d.fail()
			}
			o.Chunks[i].Size = uint32(s)
		}
	}
	if n := d.count(); n > 0 {
		o.PartSizes = make([]int64, n)
		for i := range o.PartSizes {
			o.PartSizes[i] = d.varint()
		}
	}
	if o.Striped {
		k, m := d.uvarint(), d.uvarint()
		o.Stripe = object.Stripe{K: int(min(k, 1<<16)), M: int(min(m, 1<<16)), Size: d.varint(), Upload: d.str()}
		if k < 1 || (m < 1 && k != 1) || k > 255 || m > 255 || o.Stripe.Size < 1 || o.Stripe.Size > 1<<32 {
			d.fail()
		}
		if n := d.count(); n > 0 {
			o.Stripe.Parts = make([]int, n)
			for i := range o.Stripe.Parts {
				v := d.uvarint()
				if v > 1<<20 {
					d.fail()
				}
				o.Stripe.Parts[i] = int(v)
			}
		}
	}
	if v[0] >= recordVersionMeta {
		o.MetaHLC = d.uvarint()
		if n := d.count(); n > 0 {
			o.Tags = make([][2]string, n)
			for i := range o.Tags {
				o.Tags[i] = [2]string{d.str(), d.str()}
			}
		}
		if n := d.count(); n > 0 {
			o.PartChecksums = make([]string, n)
			for i := range o.PartChecksums {
				o.PartChecksums[i] = d.str()
			}
		}
	}
	if v[0] >= recordVersionLock {
		o.TagsHLC = d.uvarint()
		o.Retention.Mode = d.str()
		o.Retention.Until = d.varint()
		o.RetentionHLC = d.uvarint()
		if h := d.bytes(1); d.err == nil {
			o.LegalHold = h[0] == 1
			if h[0] > 1 {
				d.fail()
			}
		}
		o.HoldHLC = d.uvarint()
		if m := o.Retention.Mode; m != "" && m != object.LockGovernance && m != object.LockCompliance {
			d.fail()
		}
	}
	if v[0] >= recordVersionExt {
		o.Owner = d.str()
		o.ACL = d.str()
		o.ACLHLC = d.uvarint()
		o.SSE.Algorithm = d.str()
		o.SSE.KeyID = d.str()
		if n := d.count(); n > 0 {
			o.SSE.SealedKey = append([]byte(nil), d.bytes(n)...)
		}
		o.SSE.KeyMD5 = d.str()
		o.SSE.PlainSize = d.varint()
		if o.SSE.PlainSize < 0 {
			d.fail()
		}
	}
	if o.Embedded {
		n := d.uvarint()
		if n > uint64(len(d.b)) {
			d.fail()
		} else {
			o.Body = d.bytes(int(n))
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err == nil && o.Mutable && (o.Inline || len(o.Chunks) > 0 || o.Striped || o.Size > MaxMutableSize) {
		d.fail()
	}
	if d.err == nil && (o.Size < 0 || (o.Inline && len(o.Chunks) > 0) || (o.Embedded && (!o.Inline || int64(len(o.Body)) != o.BodySize()))) {
		d.fail()
	}
	return d.err
}

// A chunk location value (C/<chunk id>) has one of two formats:
//
//	format 1: seg u32, off u64, len u32 (16 bytes)
//	format 2: format 1, then the block shift (1 byte, 12: 4 KiB blocks), then the
//	          CRC-32C of each block of the payload, u32 each (the last block may be short)
//
// Format 2 is written for the chunks of mutable objects (volume data), whose small reads
// then read and check only the blocks they cover (Reader.writeMutable); the record's own
// checksum of the whole payload is still written and checked by whole reads (compaction,
// the journal's replay). Format 1 is what every other chunk, and every chunk before
// format 2, has; it is read as before: the whole record, checked whole.
func encodeLoc(l segment.Loc) []byte { return encodeChunkAt(l, nil) }

// encodeChunkAt encodes a location with the block checksums sums (format 2), or without
// (format 1) if sums is nil.
func encodeChunkAt(l segment.Loc, sums []byte) []byte {
	n := 16
	if sums != nil {
		n += 1 + len(sums)
	}
	b := make([]byte, 16, n)
	binary.BigEndian.PutUint32(b[0:], l.Seg)
	binary.BigEndian.PutUint64(b[4:], uint64(l.Off))
	binary.BigEndian.PutUint32(b[12:], l.Len)
	if sums != nil {
		b = append(b, blockShift)
		b = append(b, sums...)
	}
	return b
}

// decodeChunkAt decodes a location value of either format; sums (nil for format 1) is a
// sub-slice of b.
func decodeChunkAt(b []byte) (l segment.Loc, sums []byte, err error) {
	if len(b) < 16 {
		return segment.Loc{}, nil, errors.E(errors.Op("store.decodeLoc"), errors.Corrupt, "malformed chunk location")
	}
	l = segment.Loc{
		Seg: binary.BigEndian.Uint32(b[0:]),
		Off: int64(binary.BigEndian.Uint64(b[4:])),
		Len: binary.BigEndian.Uint32(b[12:]),
	}
	if len(b) == 16 {
		return l, nil, nil
	}
	if b[16] != blockShift {
		return segment.Loc{}, nil, errors.Errorf(errors.Op("store.decodeLoc"), errors.Corrupt, "chunk location with block shift %d (this build knows %d)", b[16], blockShift)
	}
	if len(b) != 17+4*blocks(int64(l.Len)) {
		return segment.Loc{}, nil, errors.E(errors.Op("store.decodeLoc"), errors.Corrupt, "chunk location with the wrong number of block checksums")
	}
	return l, b[17:], nil
}

// blockShift is log2 of the span of one block checksum of a format-2 chunk location.
const (
	blockShift = 12
	blockSize  = 1 << blockShift
)

// blocks is the number of blocks of an n-byte payload.
func blocks(n int64) int { return int((n + blockSize - 1) >> blockShift) }

// blockShiftOp is the linear map that appending blockSize zero bytes applies to a CRC-32C
// register, as its images of the register's 32 bits. The CRC-32C of A||B, where B is one
// block, is blockShiftOp applied to A's CRC, xor B's (the all-ones pre- and
// post-conditioning cancel out): a chunk's record checksum follows from its block
// checksums without a second pass over the chunk. (checksum.Algorithm.Combine does the
// same for any length, building the operator on every call: too slow for 64 per chunk.)
var blockShiftOp = zerosOp(blockSize)

func zerosOp(n int) (op [32]uint32) {
	for i := range op {
		r := uint32(1) << i
		for range n {
			r = crcTable[r&0xff] ^ r>>8
		}
		op[i] = r
	}
	return op
}

// wholeSum returns the CRC-32C of a payload of whole blocks from their checksums
// (blockSums).
func wholeSum(sums []byte) uint32 {
	crc := binary.BigEndian.Uint32(sums)
	for i := 4; i < len(sums); i += 4 {
		var shifted uint32
		for v := crc; v != 0; v &= v - 1 {
			shifted ^= blockShiftOp[bits.TrailingZeros32(v)]
		}
		crc = shifted ^ binary.BigEndian.Uint32(sums[i:])
	}
	return crc
}

// blockSums returns the CRC-32C of each block of payload, u32 big-endian each.
func blockSums(payload []byte) []byte {
	sums := make([]byte, 0, 4*blocks(int64(len(payload))))
	for off := 0; off < len(payload); off += blockSize {
		sums = binary.BigEndian.AppendUint32(sums, crc32.Checksum(payload[off:min(off+blockSize, len(payload))], crcTable))
	}
	return sums
}
