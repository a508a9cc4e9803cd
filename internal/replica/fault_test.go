package replica_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/replica/replicatest"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

func write(b []byte) replica.Write {
	s := md5.Sum(b)
	return replica.Write{Bucket: replicatest.Bucket, Key: "k", Meta: &object.Object{}, Body: bytes.NewReader(b), Size: int64(len(b)), Version: 1,
		FinalNow: &object.Object{Size: int64(len(b)), ETag: hex.EncodeToString(s[:])}}
}

// TestFaults checks each injected fault against the holder's state: what fails before the
// holder is asked leaves it unchanged, a lost answer leaves it changed.
func TestFaults(t *testing.T) {
	ctx := context.Background()
	b := bytes.Repeat([]byte("x"), 64<<10)
	for _, tc := range []struct {
		name    string
		inject  func(f *replica.Faults)
		stored  bool
		errKind errors.Kind
	}{
		{"partition", func(f *replica.Faults) { f.Partition() }, false, errors.Transient},
		{"fail", func(f *replica.Faults) { f.Fail(errors.E(errors.NoSpace, "full")) }, false, errors.NoSpace},
		{"cut body", func(f *replica.Faults) { f.CutBodyAfter(1000) }, false, errors.IO},
		{"lose answers", func(f *replica.Faults) { f.LoseAnswers() }, true, errors.Transient},
		{"delay", func(f *replica.Faults) { f.Delay(10 * time.Millisecond) }, true, errors.Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLocal(t)
			f := replica.NewFaults()
			tc.inject(f)
			_, err := f.Wrap(l).Put(ctx, write(b))
			if tc.errKind == errors.Other {
				if err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(tc.errKind, err) {
				t.Fatalf("put: %v, want kind %v", err, tc.errKind)
			}
			_, serr := l.Stat(ctx, replicatest.Bucket, "k")
			if (serr == nil) != tc.stored {
				t.Fatalf("stored = %v (%v), want %v", serr == nil, serr, tc.stored)
			}
		})
	}
	t.Run("hang until healed", func(t *testing.T) {
		l := newLocal(t)
		f := replica.NewFaults()
		f.HangBodyAfter(1000)
		done := make(chan error, 1)
		go func() { _, err := f.Wrap(l).Put(ctx, write(b)); done <- err }()
		proctest.Holds(t, 100*time.Millisecond, func() error {
			select {
			case err := <-done:
				return fmt.Errorf("a hung body finished: %v", err)
			default:
				return nil
			}
		})
		f.Heal()
		if err := <-done; err != nil {
			t.Fatalf("after heal: %v", err)
		}
		hctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		f.Hang()
		if _, err := f.Wrap(l).Stat(hctx, replicatest.Bucket, "k"); err == nil {
			t.Fatal("a hung call returned before its context ended")
		}
	})
}
