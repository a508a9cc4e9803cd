package gateway

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/object"
)

// Two gateways that hold no copy of a key and whose clocks read the same microsecond
// write it one after the other: with the map's clock tags they issue distinct versions,
// so a versioned bucket keeps both and every holder of an unversioned key keeps the same
// one. Untagged, the second write took the first one's version: the holders kept the
// first body and acknowledged the second, which was lost.
func TestSameMicrosecondWrites(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, untagged := range []bool{false, true} {
		c := newCluster(t, 5, clusterConfig{clockNow: func() time.Time { return now }, untagged: untagged})
		c.createBucket("b")
		key := c.keyWhere("b", "k", func([]int) bool { return true })
		_, others := c.replicaSet("b", key)
		ga, gb := c.nodes[others[0]].gw, c.nodes[others[1]].gw
		va := putVersion(t, ga, "b", key, "", []byte("first"))
		vb := putVersion(t, gb, "b", key, "", []byte("second"))
		if untagged {
			if va.HLC != vb.HLC {
				t.Fatalf("untagged clocks at one instant issued %d and %d: the test no longer shows the collision", va.HLC, vb.HLC)
			}
			continue
		}
		if va.HLC == vb.HLC {
			t.Fatalf("two gateways issued the same version %d", va.HLC)
		}
		for _, v := range []struct {
			o    *object.Object
			body string
		}{{va, "first"}, {vb, "second"}} {
			got, err := readVersion(c.nodes[0].gw, "b", key, v.o.HLC)
			if err != nil || string(got) != v.body {
				t.Fatalf("version %d: %q, %v; want %q", v.o.HLC, got, err, v.body)
			}
		}
		if got := versionsOf(t, c.nodes[0].gw, "b", 1000); len(got) != 2 {
			t.Fatalf("versions: %q, want both writes", got)
		}
		// Unversioned: every holder keeps the one that sorts last, and reads agree.
		ua := putPlain(t, ga, "b", "plain", []byte("first"))
		ub := putPlain(t, gb, "b", "plain", []byte("second"))
		win := max(ua.HLC, ub.HLC)
		replicas, _ := c.replicaSet("b", "plain")
		for _, i := range replicas {
			if o := c.storeRecord(i, "b", "plain"); o == nil || o.HLC != win {
				t.Fatalf("holder %d of plain: %+v, want version %d", i, o, win)
			}
		}
	}
}

// putPlain writes bucket/key unversioned through g.
func putPlain(t *testing.T, g *Gateway, bucket, key string, body []byte) *object.Object {
	t.Helper()
	src, fin := md5Finish(bytes.NewReader(body))
	o, err := g.PutObject(context.Background(), bucket, key, &object.Object{}, src, int64(len(body)), object.PutOptions{Finish: fin})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return o
}
