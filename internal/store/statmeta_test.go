package store

import (
	"bytes"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// TestStatMeta: StatMeta answers StatVersion's record without the embedded body (and
// does not disturb the body a read returns), tombstones included; a missing key or
// bucket fails as StatVersion does.
func TestStatMeta(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	small := randBytes(1, 4096)
	put(t, s, "b", "small", small)
	put(t, s, "b", "large", randBytes(2, cfg.ChunkSize+1))
	put(t, s, "b", "gone", []byte("x"))
	if _, err := s.DeleteVersion("b", "gone", 0, 1); err != nil { // a tombstone
		t.Fatal(err)
	}
	tests := []struct {
		bucket, key string
		deleted     bool
		err         errors.Kind // 0: none
	}{
		{"b", "small", false, 0},
		{"b", "large", false, 0},
		{"b", "gone", true, 0},
		{"b", "missing", false, errors.NotExist},
		{"nobucket", "k", false, errors.NotExist},
	}
	for _, tt := range tests {
		t.Run(tt.bucket+"/"+tt.key, func(t *testing.T) {
			m, err := s.StatMeta(tt.bucket, tt.key)
			v, verr := s.StatVersion(tt.bucket, tt.key)
			if tt.err != 0 {
				if !errors.Is(tt.err, err) || !errors.Is(tt.err, verr) {
					t.Fatalf("StatMeta %v, StatVersion %v; want kind %v from both", err, verr, tt.err)
				}
				return
			}
			if err != nil || verr != nil {
				t.Fatalf("StatMeta %v, StatVersion %v", err, verr)
			}
			if m.Body != nil {
				t.Fatalf("StatMeta returned a body of %d bytes", len(m.Body))
			}
			v.Body = nil
			if m.HLC != v.HLC || m.ETag != v.ETag || m.Size != v.Size || m.Deleted != tt.deleted || v.Deleted != tt.deleted ||
				m.ContentType != v.ContentType || m.ModTime != v.ModTime || len(m.Chunks) != len(v.Chunks) {
				t.Fatalf("StatMeta %+v, StatVersion %+v", m, v)
			}
		})
	}
	if got := readAll(t, s, "b", "small"); !bytes.Equal(got, small) {
		t.Fatal("the small body read back differs")
	}
}
