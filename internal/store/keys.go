package store

import (
	"encoding/binary"

	"github.com/cairnfs/cairn/internal/store/segment"
)

// Index key prefixes; see docs/design/20261122_storage_engine.md.
const (
	pfxBucket = "B/"
	pfxObject = "O/"
	pfxInline = "I/"
	pfxChunk  = "C/"
	pfxSeg    = "S/"
	pfxUpload = "U/"
	pfxPart   = "P/"
	pfxConfig = "G/" // bucket configurations of the single-store mode: G/<bucket>\x00<kind>
	// pfxTierGC holds the tier copies of archived versions this store's records no longer
	// name (a newer version, a delete or a purge replaced the stub): T/<tier>\x00<key>.
	pfxTierGC = "T/"
	// pfxAccess holds the last-access times of objects (Touch): A/<bucket>\x00<key>.
	pfxAccess = "A/"
)

func bucketKey(bucket string) []byte { return append([]byte(pfxBucket), bucket...) }

// configPrefix is the first key of a bucket's configurations.
func configPrefix(bucket string) []byte {
	return append(append([]byte(pfxConfig), bucket...), 0)
}

// objectPrefix is the first key of a bucket's objects; prefix narrows to keys with that prefix.
func objectPrefix(bucket, prefix string) []byte {
	b := make([]byte, 0, len(pfxObject)+len(bucket)+1+len(prefix))
	b = append(b, pfxObject...)
	b = append(b, bucket...)
	b = append(b, 0)
	return append(b, prefix...)
}

func objectKey(bucket, key string) []byte { return objectPrefix(bucket, key) }

func inlineKey(version [16]byte) []byte { return append([]byte(pfxInline), version[:]...) }

func chunkKey(id segment.ID) []byte { return append([]byte(pfxChunk), id[:]...) }

// segKey is the reverse index from a record's location to its chunk id: compaction walks
// a segment's live records with it.
func segKey(l segment.Loc) []byte {
	b := make([]byte, 0, len(pfxSeg)+12)
	b = append(b, pfxSeg...)
	b = binary.BigEndian.AppendUint32(b, l.Seg)
	return binary.BigEndian.AppendUint64(b, uint64(l.Off))
}

func segPrefix(seg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte(pfxSeg), seg)
}

func segValue(id segment.ID, n uint32) []byte {
	b := make([]byte, 0, 20)
	b = append(b, id[:]...)
	return binary.BigEndian.AppendUint32(b, n)
}

// uploadPrefix covers a bucket's uploads; uploadKey names one. The upload id has a fixed
// length, so keys containing NUL still decode.
func uploadPrefix(bucket, prefix string) []byte {
	b := append([]byte(pfxUpload), bucket...)
	b = append(b, 0)
	return append(b, prefix...)
}

func uploadKey(bucket, key, uploadID string) []byte {
	b := uploadPrefix(bucket, key)
	b = append(b, 0)
	return append(b, uploadID...)
}

func partPrefix(uploadID string) []byte {
	b := append([]byte(pfxPart), uploadID...)
	return append(b, 0)
}

func partKey(uploadID string, n int) []byte {
	return binary.BigEndian.AppendUint32(partPrefix(uploadID), uint32(n))
}

// prefixEnd returns the smallest key greater than every key with prefix p (nil if none).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
