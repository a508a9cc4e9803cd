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
