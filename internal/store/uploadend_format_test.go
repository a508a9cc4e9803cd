package store

import (
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// TestUploadEndRecordFormat pins the on-disk encoding of an upload's end record: it is the
// JSON of object.UploadEnd, whose Result uses object.Object's Go field names, so renaming a
// field of either type would change what older data directories hold. Change the types'
// names only with a codec here that still reads this.
func TestUploadEndRecordFormat(t *testing.T) {
	e := &object.UploadEnd{Bucket: "b", Key: "k", UploadID: "u", State: object.UploadCompleted,
		Parts:  []object.CompletePart{{Number: 1, ETag: "e1"}},
		Result: &object.Object{HLC: 7, Size: 3, ETag: "x-1", ChecksumAlgo: "CRC32C", Checksum: "c", ChecksumType: "COMPOSITE", PartSizes: []int64{3}},
		Ended:  9}
	const want = `{"bucket":"b","key":"k","upload_id":"u","state":"completed","parts":[{"Number":1,"ETag":"e1"}],"result":{"VersionID":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"HLC":7,"Size":3,"ModTime":0,"Deleted":false,"ETag":"x-1","ContentType":"","ContentEncoding":"","ContentDisposition":"","ContentLanguage":"","CacheControl":"","Expires":"","StorageClass":"","UserMeta":null,"ChecksumAlgo":"CRC32C","Checksum":"c","ChecksumType":"COMPOSITE","Inline":false,"Body":null,"Embedded":false,"Chunks":null,"PartSizes":[3],"Striped":false,"Stripe":{"k":0,"m":0,"size":0}},"ended":9}`
	if got := string(marshalUploadEnd(e)); got != want {
		t.Errorf("end record encoding changed:\n got %s\nwant %s", got, want)
	}
}
