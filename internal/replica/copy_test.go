package replica_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
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
	t.Run("source stalls, destination fails", func(t *testing.T) {
		// The source stops sending mid-body (a paused node) and the destination gives up:
		// Copy must return its error, not wait for the stalled source.
		fs := replica.NewFaults()
		fs.HangBodyAfter(4096)
		defer fs.Heal()
		done := make(chan error, 1)
		go func() {
			_, err := replica.Copy(ctx, fs.Wrap(src), &failsAfter{Replica: dst, n: 4096}, replicatest.Bucket, "k", o.HLC, false)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a copy whose destination failed succeeded")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Copy still waits on a stalled source 30 s after its destination failed")
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

// failsAfter is a holder whose writes fail once they read n bytes of the body, whatever
// comes next: a connection to another node that breaks.
type failsAfter struct {
	replica.Replica
	n int64
}

func (f *failsAfter) Put(ctx context.Context, w replica.Write) (*object.Object, error) {
	if _, err := io.CopyN(io.Discard, w.Body, f.n); err != nil {
		return nil, err
	}
	return nil, errors.E(errors.IO, "connection reset")
}
