package replica_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// objectWrite is a put batch's write of data as key at version v.
func objectWrite(key string, v uint64, data []byte) replica.Write {
	fin := finalMeta(data)
	fin.HLC = v
	return replica.Write{Bucket: bucket, Key: key, Meta: &object.Object{ContentType: "text/plain", ModTime: 1700000000000000000},
		Body: bytes.NewReader(data), Size: int64(len(data)), Version: v, FinalNow: fin}
}

// TestPutBatchEachOwnOutcome: in one batch, a write that must find its key absent and
// does not, a write older than the holder's record, and a write whose body is not the
// size its final metadata says each get their own outcome; the good ones are applied
// and read back byte for byte, the failed ones change nothing.
func TestPutBatchEachOwnOutcome(t *testing.T) {
	b := newBatchEnv(t, nil)
	vs := versions(4)
	ctx := context.Background()
	if res, err := b.remote.PutBatch(ctx, []replica.Write{objectWrite("taken", vs[2], []byte("first")), objectWrite("newer", vs[3], []byte("newest"))}); err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("the first batch: %v %+v", err, res)
	}
	good1, good2 := randBytes(1, 4096), randBytes(2, 100)
	absent := objectWrite("taken", vs[3], []byte("second"))
	absent.IfAbsent = true
	wrongSize := objectWrite("short", vs[1], []byte("12345"))
	wrongSize.FinalNow.Size = 4
	ws := []replica.Write{objectWrite("good1", vs[1], good1), absent, objectWrite("newer", vs[0], []byte("older")), wrongSize, objectWrite("good2", vs[1], good2)}
	res, err := b.remote.PutBatch(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Object == nil || res[0].Object.HLC != vs[1] || res[4].Err != nil {
		t.Fatalf("the good writes: %+v %+v", res[0], res[4])
	}
	if res[1].Err == nil {
		t.Fatal("a write that must find its key absent was applied over a record")
	}
	if res[2].Err != nil || res[2].Object == nil || res[2].Object.HLC != vs[3] {
		t.Fatalf("an older write: %+v; want the holder's newer record", res[2])
	}
	if !errors.Is(errors.Invalid, res[3].Err) {
		t.Fatalf("a body of another size than its final metadata's: %v", res[3].Err)
	}
	for key, want := range map[string][]byte{"good1": good1, "good2": good2, "taken": []byte("first"), "newer": []byte("newest")} {
		if got := readStore(t, b.st, bucket, key); !bytes.Equal(got, want) {
			t.Errorf("%s reads %q, want %q", key, got[:min(len(got), 16)], want[:min(len(want), 16)])
		}
	}
	if got := b.orders(t, "short"); got[0] != 0 {
		t.Fatalf("the refused write was stored at %d", got[0])
	}
}

// TestPutBatchRefused: object batches that are malformed, oversized, unauthenticated,
// with a capability of another kind or bucket, with a write of another bucket or
// unreadable metadata, or changed in transit are refused as a whole and write nothing.
func TestPutBatchRefused(t *testing.T) {
	b := newBatchEnv(t, nil)
	vs := versions(1)
	body := func(ws ...wire.ObjectWrite) []byte {
		out := wire.AppendObjectBatchHead(nil, len(ws))
		for i := range ws {
			out = wire.AppendObjectWrite(out, &ws[i])
		}
		return out
	}
	ow := func(bkt, key string, meta string) wire.ObjectWrite {
		data := []byte("data of " + key)
		return wire.ObjectWrite{Bucket: bkt, Key: key, Version: vs[0], ModTime: 1, Meta: meta, Final: wire.EncodeMeta(finalMeta(data)), Body: data}
	}
	meta := wire.EncodeMeta(&object.Object{ContentType: "text/plain"})
	small := body(ow(bucket, "k1", meta), ow(bucket, "k2", meta))
	wrongSec := newSecret(t, wrongSecret)
	capOK := &rpc.Cap{Op: rpc.CapObjectBatch, Bucket: bucket}
	for _, tc := range []struct {
		name   string
		secret *rpc.Secret
		rt     http.RoundTripper
		body   []byte
		length string
		cap    *rpc.Cap
		kind   errors.Kind
	}{
		{name: "cut short", body: small[:len(small)-10], kind: errors.Invalid},
		{name: "longer than its length", body: small, length: strconv.Itoa(len(small) - 1), kind: errors.Invalid},
		{name: "no length", body: small, length: "x", kind: errors.Invalid},
		{name: "a range batch", body: wire.AppendRangeBatchHead(nil, 1), kind: errors.Invalid},
		{name: "oversized", body: small, length: strconv.Itoa(wire.MaxObjectBatchBody + 1), kind: errors.TooLarge},
		{name: "a write of another bucket", body: body(ow(bucket, "k1", meta), ow(otherBucket, "k2", meta)), kind: errors.Permission},
		{name: "unreadable metadata", body: body(ow(bucket, "k1", meta), ow(bucket, "k2", "{not json")), kind: errors.Invalid},
		{name: "another cluster's secret", secret: wrongSec, body: small, kind: errors.Permission},
		{name: "a range batch's capability", body: small, cap: &rpc.Cap{Op: rpc.CapRangeBatch, Bucket: bucket}, kind: errors.Permission},
		{name: "a capability of another bucket", body: small, cap: &rpc.Cap{Op: rpc.CapObjectBatch, Bucket: otherBucket}, kind: errors.Permission},
		{name: "no capability", body: small, cap: &rpc.Cap{}, kind: errors.Permission},
		{name: "changed in transit", body: small, rt: flipper{b.tr, 60}, kind: errors.Permission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.secret == nil {
				tc.secret = b.secret
			}
			if tc.rt == nil {
				tc.rt = b.tr
			}
			if tc.length == "" {
				tc.length = strconv.Itoa(len(tc.body))
			}
			if tc.cap == nil {
				tc.cap = capOK
			}
			b.wantRefused(t, wire.PathObjectBatch, tc.secret, tc.rt, tc.body, tc.length, tc.cap, tc.kind)
			if got := b.orders(t, "k1", "k2"); got[0] != 0 || got[1] != 0 {
				t.Fatalf("a refused batch wrote: orders %v", got)
			}
		})
	}
}

// TestPutBatchHolderGoneMidBatch: the holder's connection dies while a streamed batch
// body is on its way: the call fails Transient for every write of it, the holder
// applied none of them, and the writes sent again are taken.
func TestPutBatchHolderGoneMidBatch(t *testing.T) {
	b := newBatchEnv(t, nil)
	vs := versions(1)
	var ws []replica.Write
	var bodies [][]byte
	for i := range 20 {
		bodies = append(bodies, randBytes(uint64(100+i), replica.MaxBatchedBody))
		ws = append(ws, objectWrite("k"+strconv.Itoa(i), vs[0], bodies[i]))
	}
	cut := &cutter{rt: b.tr, after: 512 << 10, reached: make(chan struct{}), release: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-cut.reached
		b.srv.CloseClientConnections()
		close(cut.release)
	}()
	_, err := b.remoteWith(b.secret, cut).PutBatch(context.Background(), ws)
	wg.Wait()
	if !errors.Is(errors.Transient, err) {
		t.Fatalf("a batch whose holder went: %v", err)
	}
	keys := make([]string, len(ws))
	for i := range ws {
		keys[i] = ws[i].Key
	}
	for i, o := range b.orders(t, keys...) {
		if o != 0 {
			t.Fatalf("the holder applied write %d of a cut batch", i)
		}
	}
	for i := range ws {
		ws[i].Body = bytes.NewReader(bodies[i])
	}
	res, err := b.remote.PutBatch(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("write %d sent again: %v", i, r.Err)
		}
		if got := readStore(t, b.st, bucket, ws[i].Key); !bytes.Equal(got, bodies[i]) {
			t.Fatalf("write %d reads back other bytes", i)
		}
	}
}
