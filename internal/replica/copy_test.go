package replica_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/replica/replicatest"
)

// TestCopy copies a version between two holders: whole, as a repair of a damaged copy of
// the same version, and from a source whose body is cut, which must leave nothing on the
// destination.
func TestCopy(t *testing.T) {
	ctx := context.Background()
	b := bytes.Repeat([]byte("copy me "), 20<<10)
	src, dst := newLocal(t), newLocal(t)
	o, err := src.Put(ctx, write(b))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("cut source", func(t *testing.T) {
		f := replica.NewFaults()
		f.CutBodyAfter(4096)
		if _, err := replica.Copy(ctx, f.Wrap(src), dst, replicatest.Bucket, "k", o.HLC, false); err == nil {
			t.Fatal("copy from a source cut mid-body succeeded")
		}
		if _, err := dst.Stat(ctx, replicatest.Bucket, "k"); !errors.Is(errors.NotExist, err) {
			t.Fatalf("destination after a failed copy: %v, want NotExist", err)
		}
	})
	t.Run("whole", func(t *testing.T) {
		n, err := replica.Copy(ctx, src, dst, replicatest.Bucket, "k", o.HLC, false)
		if err != nil || n != int64(len(b)) {
			t.Fatalf("copy: %d bytes, %v; want %d", n, err, len(b))
		}
		if got := readAll(t, dst); !bytes.Equal(got, b) {
			t.Fatal("the copy differs from the source")
		}
		// The same version again, without repair: the holder keeps what it has.
		if _, err := replica.Copy(ctx, src, dst, replicatest.Bucket, "k", o.HLC, false); err != nil && !errors.Is(errors.Precondition, err) {
			t.Fatalf("copy of a version held: %v", err)
		}
	})
	t.Run("missing version", func(t *testing.T) {
		if _, err := replica.Copy(ctx, src, dst, replicatest.Bucket, "k", o.HLC+1, false); !errors.Is(errors.NotExist, err) && !errors.Is(errors.Precondition, err) {
			t.Fatalf("copy of a version the source lacks: %v, want NotExist or Precondition", err)
		}
	})
	t.Run("repair", func(t *testing.T) {
		if _, err := replica.Copy(ctx, src, dst, replicatest.Bucket, "k", o.HLC, true); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, dst); !bytes.Equal(got, b) {
			t.Fatal("the repaired copy differs from the source")
		}
	})
}

func readAll(t *testing.T, r replica.Replica) []byte {
	t.Helper()
	rd, err := r.Open(context.Background(), replicatest.Bucket, "k", replica.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var buf bytes.Buffer
	if _, err := rd.WriteRange(context.Background(), &buf, 0, rd.Info().Size); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
