package repair

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestTierRestoreExpiry: RestoreObject with Days of a version archived in a restore-mode
// tier makes a temporary copy: HEAD says ongoing-request="false" with the expiry (the
// midnight UTC after Days), GETs read it (identical bytes, the version's ETag) while the
// version stays archived, a second RestoreObject renews it (200); once the injected clock
// passes the expiry the tier loop drops the copy, and GET is InvalidObjectState again.
func TestTierRestoreExpiry(t *testing.T) {
	c, clock := newTierCluster(t, clustermap.RecallRestore)
	ctx := context.Background()
	c.setBuckets(t, map[string]map[string]string{"r": nil})
	body := bytes.Repeat([]byte("restore me "), 30<<10)
	o := putMeta(t, c, "r", "k", body, object.Object{ContentType: "text/x-r"})
	gw := c.nodes[1].gw
	if n, err := gw.Migrate(ctx, "r", "k", o.HLC, "cold"); err != nil || n != int64(len(body)) {
		t.Fatalf("migrate: %d, %v", n, err)
	}
	read := func() ([]byte, *object.Object, error) {
		rd, err := gw.OpenObject(ctx, "r", "k")
		if err != nil {
			return nil, nil, err
		}
		defer rd.Close()
		var buf bytes.Buffer
		_, err = rd.WriteRange(ctx, &buf, 0, rd.Info().Size)
		return buf.Bytes(), rd.Info(), err
	}
	if _, _, err := read(); !errors.IsErr(err, object.ErrInvalidObjectState) {
		t.Fatalf("get before the restore: %v, want InvalidObjectState", err)
	}
	if h, err := gw.StatObject(ctx, "r", "k"); err != nil || h.StorageClass != "GLACIER" || h.Restore != "" {
		t.Fatalf("head before the restore: %+v, %v", h, err)
	}
	started, err := gw.RestoreObject(ctx, "r", "k", 2)
	if err != nil || !started {
		t.Fatalf("restore: %v, %v", started, err)
	}
	exp := time.Now().UTC().Add(48 * time.Hour).Truncate(24 * time.Hour).Add(24 * time.Hour)
	want := fmt.Sprintf(`ongoing-request="false", expiry-date="%s"`, exp.Format(http.TimeFormat))
	proctest.WaitFor(t, 20*time.Second, func() error {
		h, err := gw.StatObject(ctx, "r", "k")
		if err != nil || h.Restore != want || h.StorageClass != "GLACIER" || h.ETag != o.ETag {
			return fmt.Errorf("head: %+v, %v; want x-amz-restore %s", h, err, want)
		}
		return nil
	})
	got, info, err := read()
	if err != nil || !bytes.Equal(got, body) || info.ETag != o.ETag || info.ContentType != "text/x-r" {
		t.Fatalf("get of the restored copy: %d bytes, %+v, %v", len(got), info, err)
	}
	for _, n := range c.nodes {
		if rec, err := n.st.StatVersion("r", "k"); err != nil || !rec.Tiered() {
			t.Fatalf("%s: the version is not archived any more while restored: %+v, %v", n.id, rec, err)
		}
	}
	if started, err := gw.RestoreObject(ctx, "r", "k", 2); err != nil || started {
		t.Fatalf("restore of a restored object: %v, %v; want 200 (renewed)", started, err)
	}
	proctest.WaitFor(t, 20*time.Second, func() error { // the renewal is done
		if h, err := gw.StatObject(ctx, "r", "k"); err != nil || !strings.HasPrefix(h.Restore, `ongoing-request="false"`) {
			return fmt.Errorf("head: %+v, %v", h, err)
		}
		return nil
	})
	dropped := 0
	for _, n := range c.nodes { // not yet expired
		dropped += n.loops.DropExpiredRestores(ctx)
	}
	if dropped != 0 {
		t.Fatalf("dropped %d copies before their expiry", dropped)
	}
	clock.set(exp.Add(time.Second))
	for _, n := range c.nodes {
		dropped += n.loops.DropExpiredRestores(ctx)
	}
	if dropped != 1 {
		t.Fatalf("dropped %d copies after the expiry, want 1", dropped)
	}
	if h, err := gw.StatObject(ctx, "r", "k"); err != nil || h.Restore != "" || h.StorageClass != "GLACIER" {
		t.Fatalf("head after the expiry: %+v, %v", h, err)
	}
	if _, _, err := read(); !errors.IsErr(err, object.ErrInvalidObjectState) {
		t.Fatalf("get after the expiry: %v, want InvalidObjectState", err)
	}
}

// TestTierTwoMarkedClasses: a key held by nodes of two device classes that both have
// water marks, both past their high marks, is migrated by one node only: the first up
// holder across the marked classes (the archive nodes, unmarked, are passed over), not
// the first of each class; so with both classes' passes running at once the tier holds
// one copy per key, and every holder has the stub. The passes hold 5 candidates at a
// time (batches of the least recently used, scanned again until done).
func TestTierTwoMarkedClasses(t *testing.T) {
	c, _ := newTierCluster(t, clustermap.RecallTransparent)
	ctx := context.Background()
	m := c.maps.Current().Clone()
	m.Epoch++
	m.Nodes[0].DeviceClass, m.Nodes[1].DeviceClass = "ssd", "nvme"
	m.Nodes[0].Capacity, m.Nodes[1].Capacity = 1000, 1000 // past any mark, never under the low one
	m.WaterMarks = map[string]clustermap.WaterMarks{
		"ssd":  {DeviceClass: "ssd", High: 50, Low: 10, Tier: "cold"},
		"nvme": {DeviceClass: "nvme", High: 50, Low: 10, Tier: "cold"},
	}
	c.maps.Set(m)
	c.setBuckets(t, map[string]map[string]string{"two": nil, clustermap.TierBucket: nil})
	var keys []string
	for i := range 12 {
		k := fmt.Sprintf("k%02d", i)
		keys = append(keys, k)
		putMeta(t, c, "two", k, bytes.Repeat([]byte{byte(i)}, 20<<10), object.Object{})
	}
	c.settle(t, "two")
	tc, err := c.nodes[0].gw.Topology().Layout(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		var who []string
		for _, n := range c.nodes {
			if n.loops.firstUpMarkedHolder(m, tc.Table.Lookup("two", k)) {
				who = append(who, n.id)
			}
		}
		if len(who) != 1 || (who[0] != c.nodes[0].id && who[0] != c.nodes[1].id) {
			t.Fatalf("%s is migrated by %v, want one node of a marked class", k, who)
		}
	}
	done := make(chan int64, 2)
	for _, n := range c.nodes[:2] {
		n.loops.tierBatch = 5 // each pass holds 5 candidates at a time: three batches for 12 keys
		go func() { done <- n.loops.TierPass(ctx) }()
	}
	moved := <-done + <-done
	if want := int64(len(keys) * 20 << 10); moved != want {
		t.Fatalf("the two passes moved %d bytes, want %d (each key once)", moved, want)
	}
	copies := 0
	page, err := c.nodes[2].st.ListVersions(clustermap.TierBucket, object.VersionListOptions{Prefix: "cold/", Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range page.Versions {
		if v.Current && !v.Object.DeleteMarker && !v.Object.Deleted {
			copies++
		}
	}
	if copies != len(keys) {
		t.Fatalf("%d copies in the tier for %d keys", copies, len(keys))
	}
	for _, k := range keys {
		for _, n := range c.nodes {
			if o, err := n.st.StatVersion("two", k); err != nil || !o.Tiered() {
				t.Fatalf("%s on %s: %+v, %v; want the stub", k, n.id, o, err)
			}
		}
	}
}
