package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/console"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/browser"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestBrowserConsole drives the web console of a 3-node cluster in headless Chromium: a
// wrong password is refused, the right one logs in, the page shows the figures `cairn
// admin status --json` reports (buckets' objects and bytes, nodes, epoch), the recovery
// rate set on the page reaches the nodes, and a node killed turns down on the page. An
// action without the CSRF token is refused (plain HTTP). CAIRN_CONSOLE_SCREENSHOT=FILE
// saves the page (docs/img/console.png is made so).
func TestBrowserConsole(t *testing.T) {
	skipShort(t)
	if raceEnabled {
		t.Skip("browser test: run by make test-long, not under the race detector")
	}
	browser.Require(t)
	tc := startCluster(t, 3, "--down-after", "2s")
	ctx := context.Background()
	tc.createBucket(0, "photos")
	tc.createBucket(1, "logs")
	if out, err := tc.admin(0, "class", "create", "COLD", "--ec", "2+1"); err != nil {
		t.Fatalf("class create: %v\n%s", err, out)
	}
	policy := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(policy, []byte("*.log => COLD\n"), 0o644)
	if out, err := tc.admin(0, "policy", "set", "logs", policy); err != nil {
		t.Fatalf("policy set: %v\n%s", err, out)
	}
	want := map[string][2]int64{}
	for i := 0; i < 24; i++ {
		bucket, key, size := "photos", fmt.Sprintf("img/%03d.jpg", i), 1000+i*517
		if i%3 == 0 {
			bucket, key = "logs", fmt.Sprintf("day-%02d.log", i)
		}
		if i == 7 {
			size = 1<<20 + 123 // a streamed, chunked object
		}
		c := tc.procs[i%3].client()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(make([]byte, size))}); err != nil {
			t.Fatalf("put %s/%s: %v", bucket, key, err)
		}
		w := want[bucket]
		want[bucket] = [2]int64{w[0] + 1, w[1] + int64(size)}
	}
	// Writes are acknowledged by a quorum: wait until every copy is in place, when the
	// status counts each object once.
	var st *server.Status
	proctest.WaitFor(t, 20*time.Second, func() error {
		st = tc.status(0)
		for _, b := range st.BucketUsage {
			if w := want[b.Name]; b.Objects != w[0] || b.Bytes != w[1] || b.Records != 3*w[0] {
				return fmt.Errorf("bucket %s: %d objects (%d records), %d bytes; want %d, %d", b.Name, b.Objects, b.Records, b.Bytes, w[0], w[1])
			}
		}
		return nil
	})

	b := browser.New(t, 60*time.Second)
	b.SetViewport(1400, 1050)
	start := time.Now()
	b.Navigate("http://" + tc.procs[1].AdminAddr() + "/") // redirected to /console/
	b.WaitText("#login-button", 5*time.Second, func(s string) bool { return s == "Log in" })
	login := func(accessKey, password string) {
		t.Helper()
		if _, err := browser.Eval[bool](b, `(() => { document.querySelector("#access-key").value = `+strconv.Quote(accessKey)+
			`; document.querySelector("#password").value = `+strconv.Quote(password)+`; return true })()`); err != nil {
			t.Fatal(err)
		}
		b.Click("#login-button")
	}
	login("", "not-the-secret")
	b.WaitText("#login-error", 5*time.Second, func(s string) bool { return strings.Contains(s, "wrong password") })
	login(testAccess, "not-the-secret-key")
	b.WaitText("#login-error", 5*time.Second, func(s string) bool { return strings.Contains(s, "wrong access key") })
	login(testAccess, testSecret) // the root user's key
	epoch := strconv.FormatUint(st.Epoch, 10)
	b.WaitText("#epoch", 5*time.Second, func(s string) bool { return s != "" })
	// The page and the CLI read the same status: the same numbers once nothing changes.
	st = tc.status(0)
	b.WaitText("#epoch", 5*time.Second, func(s string) bool { epoch = strconv.FormatUint(st.Epoch, 10); return s == epoch })
	for _, bs := range st.BucketUsage {
		sel := `tr[data-bucket="` + bs.Name + `"]`
		b.WaitText(sel+" .objects", 5*time.Second, func(s string) bool { return s == strconv.FormatInt(bs.Objects, 10) })
		got, err := browser.Eval[string](b, `document.querySelector('`+sel+` .bytes').dataset.bytes`)
		if err != nil || got != strconv.FormatInt(bs.Bytes, 10) {
			t.Fatalf("bucket %s: page shows %q bytes (%v), status %d", bs.Name, got, err, bs.Bytes)
		}
	}
	for _, n := range st.Nodes {
		b.WaitText(`tr[data-node="`+n.ID+`"] .state`, 5*time.Second, func(s string) bool { return s == string(n.State) })
		b.WaitText(`tr[data-node="`+n.ID+`"] .used`, 5*time.Second, func(s string) bool { return s != "-" })
	}
	if got := b.Text(`tr[data-class="COLD"] td:nth-child(2)`); got != "EC 2+1" {
		t.Fatalf("class COLD shown as %q", got)
	}
	t.Logf("logged in and checked the page against the status in %v", time.Since(start).Round(time.Millisecond))
	if path := os.Getenv("CAIRN_CONSOLE_SCREENSHOT"); path != "" {
		if err := os.WriteFile(path, b.Screenshot(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// An action through the page: the recovery rate, as `cairn admin recovery set` does.
	if _, err := browser.Eval[bool](b, `(() => { const r = document.querySelector("#rate"); r.focus(); r.value = "5"; return true })()`); err != nil {
		t.Fatal(err)
	}
	b.Click(`#rate-form button`)
	b.WaitText("#action-result", 5*time.Second, func(s string) bool { return strings.Contains(s, "done") })
	for _, n := range tc.status(0).Nodes {
		if r := n.Stats.Recovery; r == nil || r.RateBytes != 5<<20 {
			t.Fatalf("node %s: recovery rate %+v after the page set 5 MiB/s", n.ID, r)
		}
	}

	// An action without the session's CSRF token is refused, and changes nothing.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := "http://" + tc.procs[0].AdminAddr() + console.Prefix + "api/"
	resp, err := hc.PostForm(base+"login", url.Values{"password": {testClusterSecret}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("login over HTTP: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = hc.PostForm(base+"node", url.Values{"id": {"node2"}, "action": {"drain"}})
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("drain without the CSRF token: %v %v, want 403", resp, err)
	}
	resp.Body.Close()
	if s := tc.nodeState("node2"); s != "up" {
		t.Fatalf("node2 is %s after a refused drain", s)
	}

	// A node killed turns down on the page (the node the page talks to sees it first not
	// answering, then the map says down).
	tc.procs[2].Kill()
	b.WaitText(`tr[data-node="node3"] .state`, 20*time.Second, func(s string) bool { return s == "down" })
	b.WaitText(`tr[data-node="node3"] .state`, 20*time.Second, func(s string) bool {
		return tc.nodeState("node3") == "down" && s == "down"
	})
}
