package gateway

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/topology"
)

// Replicated classes other than STANDARD keep the object's record on its STANDARD
// holders and N checksummed copies of every chunk on N distinct nodes of the class's
// device class; a class's own chunk size cuts the object. Objects read back whole and by
// ranges with all but one copy gone, and nothing lands on nodes of another device class.
func TestReplicatedClassOnDevices(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 6, clusterConfig{})
	ssd := map[string]bool{"n1": true, "n2": true, "n3": true}
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		for i, n := range m.Nodes {
			m.Nodes[i].DeviceClass = "hdd"
			if ssd[n.ID] {
				m.Nodes[i].DeviceClass = "ssd"
			}
		}
		m.Classes["FAST"] = clustermap.Class{Name: "FAST", N: 3, W: 2, R: 1, D: 2, DeviceClass: "ssd", S3Names: []string{"EXPRESS_ONEZONE"}}
		m.Classes["COLD"] = clustermap.Class{Name: "COLD", N: 2, W: 2, R: 1, D: 2, DeviceClass: "hdd", Chunk: 256 << 10}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.createBucket("b")
	const chunk = clustermap.DefaultStripe // the default chunk of a replicated class
	const cold = 256 << 10                 // COLD's
	sizes := []int{0, 1, cold - 1, cold + 1, chunk - 1, chunk + 1}
	type obj struct {
		class string
		body  []byte
	}
	objs := map[string]obj{}
	for i, size := range sizes {
		for _, class := range []string{"FAST", "EXPRESS_ONEZONE", "COLD"} {
			k := fmt.Sprintf("%s/%d", class, i)
			objs[k] = obj{class, randBody(uint64(i*7+len(class)), size)}
			o, err := putClass(ctx, c.nodes[i%6].gw, "b", k, class, objs[k].body)
			if err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
			if !o.Striped || o.Stripe.K != 1 {
				t.Fatalf("%s: stored %+v, want chunked copies", k, o.Stripe)
			}
		}
	}
	// Every shard record sits on a node of its class's device class, each a whole
	// checksummed copy; FAST has 3 copies per chunk, COLD 2 of 256 KiB chunks.
	copies := map[string]int{}
	for _, nd := range c.nodes {
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			rd, err := nd.store.OpenObject(topology.ShardBucket, e.Key)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			rd.WriteRange(ctx, &buf, 0, rd.Object.Size)
			rd.Close()
			h, payload, err := erasure.ParseShard(buf.Bytes())
			if err != nil {
				t.Fatalf("shard %s on %s: %v", e.Key, nd.id, err)
			}
			if h.K != 1 {
				t.Fatalf("shard %s on %s has k=%d", e.Key, nd.id, h.K)
			}
			dev := "hdd"
			if ssd[nd.id] {
				dev = "ssd"
			}
			switch {
			case h.M == 2 && dev != "ssd", h.M == 1 && dev != "hdd":
				t.Fatalf("a copy of 1+%d (%d bytes) on %s node %s", h.M, len(payload), dev, nd.id)
			case h.M == 1 && len(payload) > 256<<10:
				t.Fatalf("a COLD chunk of %d bytes: the class's chunk size is 256 KiB", len(payload))
			}
			copies[fmt.Sprint(h.M)]++
			return nil
		})
	}
	stripes := func(size, chunk int) int { return max(1, (size+chunk-1)/chunk) }
	var wantFast, wantCold int
	for _, size := range sizes {
		wantFast += 2 * 3 * stripes(size, chunk) // FAST and EXPRESS_ONEZONE
		wantCold += 2 * stripes(size, 256<<10)
	}
	if copies["2"] != wantFast || copies["1"] != wantCold {
		t.Fatalf("copies: %v, want FAST %d and COLD %d", copies, wantFast, wantCold)
	}
	check := func(state string) {
		t.Helper()
		for k, o := range objs {
			gw := c.nodes[5].gw
			got, info, err := get(ctx, gw, "b", k, 0, -1)
			if err != nil || !bytes.Equal(got, o.body) {
				t.Fatalf("%s %s: %v (%d bytes of %d)", state, k, err, len(got), len(o.body))
			}
			if want := map[string]string{"COLD": "COLD"}[o.class]; want != "" && info.StorageClass != want {
				t.Fatalf("%s: class %q", k, info.StorageClass)
			}
			if n := int64(len(o.body)); n > 10 {
				got, _, err := get(ctx, gw, "b", k, n/2, n/3)
				if err != nil || !bytes.Equal(got, o.body[n/2:n/2+n/3]) {
					t.Fatalf("%s %s range: %v", state, k, err)
				}
			}
		}
	}
	// A multipart upload into FAST: each part chunked into copies, nothing copied at the
	// completion.
	id, err := c.nodes[1].gw.CreateUpload(ctx, "b", "mp", &object.Object{StorageClass: "FAST"})
	if err != nil {
		t.Fatal(err)
	}
	var list []object.CompletePart
	var whole []byte
	for n, size := range []int{5<<20 + 1, 700} {
		body := randBody(uint64(300+n), size)
		whole = append(whole, body...)
		src, fin := md5Finish(bytes.NewReader(body))
		p, err := c.nodes[n].gw.PutPart(ctx, "b", "mp", id, n+1, src, int64(size), fin)
		if err != nil || !p.Striped || p.Stripe.K != 1 || p.Stripe.M != 2 {
			t.Fatalf("part %d: %+v %v", n+1, p, err)
		}
		list = append(list, object.CompletePart{Number: n + 1, ETag: p.ETag})
	}
	if _, err := c.nodes[3].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil); err != nil {
		t.Fatal(err)
	}
	objs["mp"] = obj{"FAST", whole}
	check("healthy")
	// Two of the three ssd nodes and one hdd node gone: one copy of every chunk is left
	// (the records' STANDARD holders keep a majority among the other nodes).
	c.stop(0)
	c.stop(1)
	check("with two of three ssd nodes down")
	c.restart(0)
	c.restart(1)
	c.stop(4)
	check("with one of three hdd nodes down")
}

// A class that cannot place its copies is refused before anything is written: too few
// nodes of its device class.
func TestReplicatedClassNeedsNodes(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, clusterConfig{})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Nodes[0].DeviceClass = "ssd"
		m.Nodes[1].DeviceClass = "ssd"
		m.Classes["FAST"] = clustermap.Class{Name: "FAST", N: 3, W: 2, R: 1, D: 2, DeviceClass: "ssd"}
		m.Classes["ONE"] = clustermap.Class{Name: "ONE", N: 1, W: 1, R: 1, D: 1, DeviceClass: "ssd"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.createBucket("b")
	_, err := putClass(ctx, c.nodes[0].gw, "b", "k", "FAST", []byte("x"))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("needs 3 storage nodes of device class ssd")) {
		t.Fatalf("put with 2 ssd nodes for 3 copies: %v", err)
	}
	if _, _, err := get(ctx, c.nodes[1].gw, "b", "k", 0, -1); err == nil {
		t.Fatal("a refused write left an object")
	}
	// A single checksummed copy per chunk fits.
	body := randBody(3, 3<<20+5)
	if _, err := putClass(ctx, c.nodes[2].gw, "b", "one", "ONE", body); err != nil {
		t.Fatal(err)
	}
	if got, _, err := get(ctx, c.nodes[3].gw, "b", "one", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("single copy: %v", err)
	}
}
