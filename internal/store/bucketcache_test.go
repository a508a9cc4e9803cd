package store

import (
	"bytes"
	"strconv"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// The bucket cache never answers with a bucket or configuration older than the last
// change that returned: each SetBucketConfig, DeleteBucket and CreateBucket is seen by
// the next read, while readers fill the cache concurrently; a name that does not exist
// is not kept.
func TestBucketCache(t *testing.T) {
	s, err := Open(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // readers filling the cache while it changes
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.HeadBucket("b")
				s.BucketExists("b")
			}
		})
	}
	for i := range 200 {
		v := strconv.Itoa(i)
		if err := s.SetBucketConfig("b", "versioning", []byte(v)); err != nil {
			t.Fatal(err)
		}
		if b, err := s.HeadBucket("b"); err != nil || b.Config["versioning"] != v {
			t.Fatalf("after setting %s: %v %v", v, b.Config, err)
		}
		if i%50 == 49 {
			if err := s.SetBucketConfig("b", "versioning", nil); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteBucket("b"); err != nil {
				t.Fatal(err)
			}
			if err := s.BucketExists("b"); !errors.Is(errors.NotExist, err) {
				t.Fatalf("deleted bucket: %v", err)
			}
			if _, err := s.PutObject(t.Context(), "b", "k", &object.Object{}, bytes.NewReader(nil), 0, object.PutOptions{}); !errors.Is(errors.NotExist, err) {
				t.Fatalf("write into a deleted bucket: %v", err)
			}
			if err := s.CreateBucket("b"); err != nil {
				t.Fatal(err)
			}
			if b, err := s.HeadBucket("b"); err != nil || len(b.Config) != 0 {
				t.Fatalf("recreated bucket: %v %v", b.Config, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	for i := range 100 {
		s.BucketExists("none" + strconv.Itoa(i))
	}
	s.buckets.mu.Lock()
	n := len(s.buckets.m)
	s.buckets.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets cached, want 1 (names that do not exist are not kept)", n)
	}
}
