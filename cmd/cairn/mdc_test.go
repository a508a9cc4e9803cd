package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/wire"
)

const linkSecret = "mdc-link-secret-0123456789"

// mdcSide is one cluster of a linked pair: its first node process and data directory.
type mdcSide struct {
	t   testing.TB
	p   *testProc
	dir string
	// tls: the side serves its S3 and admin listeners over TLS with a certificate of
	// this private CA (nil: plain HTTP).
	tls *tlsFiles
}

func startSide(t testing.TB, name string, env []string, extra ...string) *mdcSide {
	t.Helper()
	dir := t.TempDir()
	p := startTestProc(t, proc.Config{Name: name, DataDir: dir, Args: append([]string{"--mdc-investigate", "0"}, extra...), Env: env})
	return &mdcSide{t: t, p: p, dir: dir}
}

// mdc runs cairn mdc against this side, with stdin.
func (s *mdcSide) mdc(stdin string, args ...string) (string, error) {
	conn := []string{"mdc", "--admin", s.p.AdminAddr(), "--data", s.dir}
	if s.tls != nil {
		conn = append(conn, "--ca-file", s.tls.CAFile)
	}
	cmd := exec.Command(proctest.Bin(s.t), append(conn, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *mdcSide) mustMDC(stdin string, args ...string) string {
	s.t.Helper()
	out, err := s.mdc(stdin, args...)
	if err != nil {
		s.t.Fatalf("cairn mdc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// link links this side to endpoint under name, the secret on stdin.
func (s *mdcSide) link(name, endpoint string, extra ...string) string {
	s.t.Helper()
	return s.mustMDC(linkSecret+"\n", append([]string{"link", name, "--endpoint", endpoint, "--secret-file", "-"}, extra...)...)
}

// client is an S3 client of this side.
func (s *mdcSide) client() *s3.Client {
	if s.tls != nil {
		return s3Client(s.p.URL(), s.tls.ca.ClientConfig())
	}
	return s.p.client()
}

func (s *mdcSide) bucket(name string, versioned bool) {
	s.t.Helper()
	c := s.client()
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		s.t.Fatal(err)
	}
	if versioned {
		if _, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(name),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
			s.t.Fatal(err)
		}
	}
}

func put(t testing.TB, c *s3.Client, bucket, key, body string) {
	t.Helper()
	if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
}

func del(t testing.TB, c *s3.Client, bucket, key string) {
	t.Helper()
	if _, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		t.Fatalf("delete %s/%s: %v", bucket, key, err)
	}
}

// contents lists every version of bucket (key, version id, delete marker, ETag, body of
// the current ones), one line each, sorted: two clusters that converged list the same.
func contents(c *s3.Client, bucket string) (string, error) {
	ctx := context.Background()
	var lines []string
	var km, vm *string
	for {
		out, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), KeyMarker: km, VersionIdMarker: vm})
		if err != nil {
			return "", err
		}
		for _, v := range out.Versions {
			line := fmt.Sprintf("%s %s %s latest=%v", aws.ToString(v.Key), aws.ToString(v.VersionId), aws.ToString(v.ETag), aws.ToBool(v.IsLatest))
			if aws.ToBool(v.IsLatest) {
				g, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: v.Key})
				if err != nil {
					return "", err
				}
				b, _ := io.ReadAll(g.Body)
				g.Body.Close()
				line += " body=" + string(b)
			}
			lines = append(lines, line)
		}
		for _, m := range out.DeleteMarkers {
			lines = append(lines, fmt.Sprintf("%s %s marker latest=%v", aws.ToString(m.Key), aws.ToString(m.VersionId), aws.ToBool(m.IsLatest)))
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		km, vm = out.NextKeyMarker, out.NextVersionIdMarker
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// converge waits until every bucket lists the same on a and b.
func converge(t testing.TB, timeout time.Duration, a, b *s3.Client, buckets ...string) {
	t.Helper()
	proctest.WaitFor(t, timeout, func() error {
		for _, bk := range buckets {
			ca, err := contents(a, bk)
			if err != nil {
				return err
			}
			cb, err := contents(b, bk)
			if err != nil {
				return err
			}
			if ca != cb {
				return fmt.Errorf("bucket %s differs:\n--- a\n%s\n--- b\n%s", bk, ca, cb)
			}
		}
		return nil
	})
}

// TestMDCLink: two single-node clusters. A link with the wrong secret is refused and
// stores nothing; a link made on one side first waits for the other; then writes,
// overwrites, deletes, tag changes and versions on both sides, conflicting writes to the
// same keys included, converge to the same contents (versions, delete markers, bodies);
// pause shows lag and backlog, resume drains them; bad requests to the link endpoint
// are refused.
func TestMDCLink(t *testing.T) {
	skipShort(t)
	a, b := startSide(t, "a", nil), startSide(t, "b", nil)
	ca, cb := a.p.client(), b.p.client()
	for _, s := range []*mdcSide{a, b} {
		s.bucket("rep", false)
		s.bucket("ver", true)
	}
	aEnd, bEnd := a.p.URL(), b.p.URL()

	// B first, receiving: A has no link yet, so B's link is stored and waits.
	if out := b.link("ab", aEnd); !strings.Contains(out, "has no link ab yet") {
		t.Fatalf("first side: %s", out)
	}
	// A with the wrong secret: refused, nothing stored.
	if out, err := a.mdc("wrong-secret-0123456789\n", "link", "ab", "--endpoint", bEnd, "--secret-file", "-"); err == nil || !strings.Contains(out, "refused") {
		t.Fatalf("wrong secret: %v\n%s", err, out)
	}
	if out := a.mustMDC("", "list"); strings.Contains(out, "ab") {
		t.Fatalf("a link was stored after a refusal:\n%s", out)
	}
	// A secret on the command line is not taken.
	if out, err := a.mdc("", "link", "ab", "--endpoint", bEnd); err == nil || !strings.Contains(out, "--secret-file") {
		t.Fatalf("no secret file: %v %s", err, out)
	}
	if out := a.link("ab", bEnd); !strings.Contains(out, "remote cluster c-") {
		t.Fatalf("second side: %s", out)
	}
	if out := a.mustMDC("", "list"); !strings.Contains(out, "send+receive") || strings.Contains(out, linkSecret) {
		t.Fatalf("list:\n%s", out)
	}
	// Unknown link.
	if out, err := a.mdc("", "pause", "nope"); err == nil || !strings.Contains(out, "no link") {
		t.Fatalf("unknown link: %v %s", err, out)
	}

	// Writes on both sides.
	for i := 0; i < 20; i++ {
		put(t, ca, "rep", fmt.Sprintf("a/%d", i), fmt.Sprintf("from a %d", i))
		put(t, cb, "rep", fmt.Sprintf("b/%d", i), fmt.Sprintf("from b %d", i))
		put(t, ca, "ver", fmt.Sprintf("v/%d", i%5), fmt.Sprintf("a version %d", i))
	}
	for i := 0; i < 20; i += 3 {
		del(t, ca, "rep", fmt.Sprintf("b/%d", i)) // deletes of the other side's keys
		del(t, cb, "ver", fmt.Sprintf("v/%d", i%5))
	}
	// Conflicting writes to the same keys from both sides: the newest wins on both.
	for i := 0; i < 10; i++ {
		k := fmt.Sprintf("both/%d", i%3)
		put(t, ca, "rep", k, "a "+k)
		put(t, cb, "rep", k, "b "+k)
		put(t, cb, "ver", k, "b "+k)
		put(t, ca, "ver", k, "a "+k)
	}
	if _, err := ca.PutObjectTagging(context.Background(), &s3.PutObjectTaggingInput{Bucket: aws.String("rep"), Key: aws.String("a/1"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("color"), Value: aws.String("blue")}}}}); err != nil {
		t.Fatal(err)
	}
	converge(t, 60*time.Second, ca, cb, "rep", "ver")
	proctest.WaitFor(t, 30*time.Second, func() error {
		out, err := cb.GetObjectTagging(context.Background(), &s3.GetObjectTaggingInput{Bucket: aws.String("rep"), Key: aws.String("a/1")})
		if err != nil {
			return err
		}
		if len(out.TagSet) != 1 || aws.ToString(out.TagSet[0].Value) != "blue" {
			return fmt.Errorf("tags on b: %+v", out.TagSet)
		}
		return nil
	})

	// Changes carry their origin: what B applies from A is not stacked for the link back
	// to A (B linked first, so it learned A's id from A's signed batches). With B's side
	// paused, A's writes reach B and B's backlog holds only B's own write made after them.
	b.mustMDC("", "pause", "ab")
	for i := 0; i < 20; i++ {
		put(t, ca, "rep", fmt.Sprintf("origin/%d", i), "from a")
	}
	converge(t, 30*time.Second, ca, cb, "rep")
	put(t, cb, "rep", "origin/b", "from b")
	backlog := func(s *mdcSide) (int64, error) {
		var v struct {
			Links []struct {
				Entries int64 `json:"backlog_entries"`
			} `json:"links"`
		}
		if err := jsonOf(s.mustMDC("", "status", "--json"), &v); err != nil {
			return 0, err
		}
		if len(v.Links) != 1 {
			return 0, fmt.Errorf("links: %+v", v.Links)
		}
		return v.Links[0].Entries, nil
	}
	proctest.WaitFor(t, 30*time.Second, func() error {
		n, err := backlog(b)
		if err == nil && n == 0 {
			err = fmt.Errorf("b's own write is not in its backlog yet")
		}
		return err
	})
	if n, err := backlog(b); err != nil || n != 1 {
		t.Fatalf("b's backlog with its link paused after a's 20 writes and its own 1: %d entries (%v); want 1: a's changes are not sent back", n, err)
	}
	b.mustMDC("", "resume", "ab")
	converge(t, 30*time.Second, ca, cb, "rep")

	// Paused: changes wait, lag and backlog show; resumed, they drain.
	a.mustMDC("", "pause", "ab")
	for i := 0; i < 30; i++ {
		put(t, ca, "rep", fmt.Sprintf("paused/%d", i), "x")
	}
	proctest.WaitFor(t, 30*time.Second, func() error {
		out := a.mustMDC("", "status")
		if !strings.Contains(out, "ab (paused)") || !strings.Contains(out, "is paused") {
			return fmt.Errorf("status while paused:\n%s", out)
		}
		var v struct {
			Links []struct {
				Entries int64   `json:"backlog_entries"`
				Lag     float64 `json:"lag_seconds"`
			} `json:"links"`
		}
		if err := jsonOf(a.mustMDC("", "status", "--json"), &v); err != nil {
			return err
		}
		if len(v.Links) != 1 || v.Links[0].Entries < 30 || v.Links[0].Lag <= 0 {
			return fmt.Errorf("backlog while paused: %+v", v.Links)
		}
		return nil
	})
	a.mustMDC("", "resume", "ab")
	converge(t, 90*time.Second, ca, cb, "rep")

	// Bad input at the link endpoint: unsigned, unknown link, malformed batch.
	hc := &http.Client{Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, bEnd+wire.PathMDCApply, strings.NewReader("junk"))
	req.Header.Set("X-Cairn-Link", "ab")
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned batch: %v %v", resp, err)
	}
	sec, _ := rpc.NewSecret(linkSecret)
	for name, tc := range map[string]struct {
		link string
		body string
		want int
	}{
		"unknown link": {"nope", "", http.StatusNotFound},
		"malformed":    {"ab", "cairn-mdc/1\n\x05{}xyz", http.StatusBadRequest},
		"not a batch":  {"ab", "hello", http.StatusBadRequest},
	} {
		req, _ := http.NewRequest(http.MethodPost, bEnd+wire.PathMDCApply, bytes.NewReader([]byte(tc.body)))
		req.Header.Set("X-Cairn-Link", tc.link)
		sec.Sign(req, "c-test", 0, time.Now())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s %s, want %d", name, resp.Status, msg, tc.want)
		}
	}
	converge(t, 10*time.Second, ca, cb, "rep", "ver") // nothing changed
}

// TestMDCQueue: the sender's queue survives a SIGKILL, and the investigation repairs
// what no queue holds (a test-only hook drops the entries of keys under lost/). The
// receiver serves TLS with a certificate of a private CA: the link verifies it against
// --endpoint-ca-file (without it, the link is refused and nothing stored).
func TestMDCQueue(t *testing.T) {
	skipShort(t)
	a := startSide(t, "a", []string{"CAIRN_TEST_MDC_DROP=lost/"})
	tf := newTLSFiles(t)
	tf.issue(t, 1)
	b := startSide(t, "b", nil, "--tls-cert", tf.CertFile, "--tls-key", tf.KeyFile, "--tls-reload-interval", "-1s")
	b.tls = tf
	ca, cb := a.p.client(), b.client()
	a.bucket("rep", false)
	b.bucket("rep", false)
	b.link("ab", a.p.URL(), "--receive-only")
	if !strings.HasPrefix(b.p.URL(), "https://") {
		t.Fatalf("b's endpoint %s", b.p.URL())
	}
	if out, err := a.mdc(linkSecret+"\n", "link", "ab", "--endpoint", b.p.URL(), "--secret-file", "-"); err == nil || !strings.Contains(out, "certificate") {
		t.Fatalf("a link to a private CA's endpoint without its CA: %v\n%s", err, out)
	}
	if out := a.mustMDC("", "list"); strings.Contains(out, "ab") {
		t.Fatalf("a link was stored after a refusal:\n%s", out)
	}
	a.link("ab", b.p.URL(), "--endpoint-ca-file", tf.CAFile)
	if out := a.mustMDC("", "list"); !strings.Contains(out, "link's own") {
		t.Fatalf("list:\n%s", out)
	}
	a.mustMDC("", "pause", "ab")
	for i := 0; i < 200; i++ {
		put(t, ca, "rep", fmt.Sprintf("k/%d", i), fmt.Sprintf("body %d", i))
	}
	for i := 0; i < 10; i++ {
		put(t, ca, "rep", fmt.Sprintf("lost/%d", i), "never stacked")
	}
	a.p.Kill() // a full queue
	a.p.Restart()
	ca = a.p.client()
	a.mustMDC("", "resume", "ab")
	proctest.WaitFor(t, 60*time.Second, func() error {
		for i := 0; i < 200; i += 7 {
			if _, err := cb.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("rep"), Key: aws.String(fmt.Sprintf("k/%d", i))}); err != nil {
				st, _ := a.mdc("", "status")
				return fmt.Errorf("k/%d on b: %v\n%s", i, err, st)
			}
		}
		n, err := count(cb, "rep", "k/")
		if err != nil || n != 200 {
			return fmt.Errorf("%d of 200 on b (%v)", n, err)
		}
		return nil
	})
	if n, _ := count(cb, "rep", "lost/"); n != 0 {
		t.Fatalf("the dropped entries arrived anyway: %d", n)
	}
	// The receive-only side sends nothing back, and pushes nothing in an investigation.
	put(t, cb, "rep", "only-b", "x")
	out := a.mustMDC("", "investigate", "ab")
	if !strings.Contains(out, "10 records pushed") || !strings.Contains(out, "done") {
		t.Fatalf("investigate:\n%s", out)
	}
	if n, _ := count(cb, "rep", "lost/"); n != 10 {
		t.Fatalf("after the investigation, %d of 10 on b", n)
	}
	if _, err := ca.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("rep"), Key: aws.String("only-b")}); err == nil {
		t.Fatal("a receive-only side's object reached the sender")
	}
	if out := a.mustMDC("", "investigate", "ab"); !strings.Contains(out, "0/0 differing") && !strings.Contains(out, "0 records pushed") {
		t.Fatalf("second investigation:\n%s", out)
	}

	// A version under Object Lock on the receiver is never removed by replication: the
	// sender's permanent delete of it is refused there, counted, and the link goes on.
	ctx := context.Background()
	a.bucket("lock", true)
	if _, err := cb.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("lock"), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	po, err := ca.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lock"), Key: aws.String("kept"), Body: strings.NewReader("locked on b")})
	if err != nil {
		t.Fatal(err)
	}
	vid := po.VersionId
	proctest.WaitFor(t, 30*time.Second, func() error {
		_, err := cb.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String("lock"), Key: aws.String("kept"), VersionId: vid,
			Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeCompliance, RetainUntilDate: aws.Time(time.Now().Add(time.Hour))}})
		return err
	})
	if _, err := ca.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("lock"), Key: aws.String("kept"), VersionId: vid}); err != nil {
		t.Fatal(err)
	}
	put(t, ca, "rep", "after-lock", "x")
	proctest.WaitFor(t, 30*time.Second, func() error {
		if _, err := cb.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("rep"), Key: aws.String("after-lock")}); err != nil {
			return err
		}
		if st := b.mustMDC("", "status"); !strings.Contains(st, "refused 1") || !strings.Contains(st, "Object Lock") {
			return fmt.Errorf("status on b:\n%s", st)
		}
		return nil
	})
	if _, err := cb.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("lock"), Key: aws.String("kept"), VersionId: vid}); err != nil {
		t.Fatalf("the locked version is gone from b: %v", err)
	}
}

func count(c *s3.Client, bucket, prefix string) (int, error) {
	n := 0
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			return n, err
		}
		n += len(out.Contents)
	}
	return n, nil
}

// cutProxy forwards TCP connections to target until cut: then it refuses new ones and
// stalls the open ones (nothing forwarded) until healed.
type cutProxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed when the test ends
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
	healed chan struct{} // closed when a cut heals
}

// setCut cuts the proxy (on) or heals it.
func (p *cutProxy) setCut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && !p.cut:
		p.cut, p.healed = true, make(chan struct{})
	case !on && p.cut:
		p.cut = false
		close(p.healed)
	}
}

func (p *cutProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// waitHealed returns once the proxy is not cut, or the test has ended.
func (p *cutProxy) waitHealed() {
	p.mu.Lock()
	if !p.cut {
		p.mu.Unlock()
		return
	}
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
	case <-p.done:
	}
}

func newCutProxy(t testing.TB, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, done: make(chan struct{})}
	t.Cleanup(func() { close(p.done); ln.Close(); p.drop() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.isCut() {
				c.Close()
				continue
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) serve(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			p.waitHealed() // stalled: hold what was read until healed or the test ends
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(u, c)
	pipe(c, u)
}

// drop closes every connection the proxy holds.
func (p *cutProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestMDCCut: the link between two single-node clusters goes through a proxy that is
// cut (new connections refused, open ones stalled) while both sides take writes: both
// keep serving, the lag shows, and once healed the backlogs drain and they converge.
func TestMDCCut(t *testing.T) {
	skipShort(t)
	a, b := startSide(t, "a", nil), startSide(t, "b", nil)
	ca, cb := a.p.client(), b.p.client()
	a.bucket("rep", true)
	b.bucket("rep", true)
	toB, toA := newCutProxy(t, b.p.S3Addr()), newCutProxy(t, a.p.S3Addr())
	b.link("ab", "http://"+toA.ln.Addr().String())
	a.link("ab", "http://"+toB.ln.Addr().String())
	put(t, ca, "rep", "before", "x")
	converge(t, 30*time.Second, ca, cb, "rep")

	toB.setCut(true)
	toA.setCut(true)
	for i := 0; i < 50; i++ {
		put(t, ca, "rep", fmt.Sprintf("cut/a%d", i), "a")
		put(t, cb, "rep", fmt.Sprintf("cut/b%d", i), "b")
		put(t, ca, "rep", fmt.Sprintf("cut/both%d", i%5), "a")
		put(t, cb, "rep", fmt.Sprintf("cut/both%d", i%5), "b")
	}
	del(t, ca, "rep", "before")
	proctest.WaitFor(t, 30*time.Second, func() error {
		for _, s := range []*mdcSide{a, b} {
			var v struct {
				Links []struct {
					Entries int64   `json:"backlog_entries"`
					Lag     float64 `json:"lag_seconds"`
				} `json:"links"`
			}
			if err := jsonOf(s.mustMDC("", "status", "--json"), &v); err != nil {
				return err
			}
			if len(v.Links) != 1 || v.Links[0].Entries < 50 || v.Links[0].Lag < 1 {
				return fmt.Errorf("during the cut: %+v", v.Links)
			}
		}
		return nil
	})
	toB.setCut(false)
	toA.setCut(false)
	toB.drop()
	toA.drop()
	converge(t, 90*time.Second, ca, cb, "rep")
}

func jsonOf(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// mdc runs cairn mdc against node i of a test cluster.
func (tc *testCluster) mdc(i int, args ...string) string {
	tc.t.Helper()
	cmd := exec.Command(proctest.Bin(tc.t), append([]string{"mdc", "--admin", tc.procs[i].AdminAddr()}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}
	cmd.Stdin = strings.NewReader(linkSecret + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tc.t.Fatalf("cairn mdc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestMDCClusters: two 3-node clusters linked both ways. Writes, overwrites and deletes
// through every node of both, many to the same keys from both sides at once, converge to
// identical contents key by key, with the same versions and delete markers. Then a node
// of one is killed with changes queued on it (the link paused) and marked out: its queue
// goes with it, and the other holders of those changes, which stacked them too, send
// them once the link resumes (docs/design/mdc.md: a node marked out).
func TestMDCClusters(t *testing.T) {
	skipShort(t)
	flags := []string{"--notify-hold", "1s", "--mdc-investigate", "0"}
	A, B := startCluster(t, 3, flags...), startCluster(t, 3, flags...)
	for _, tc := range []*testCluster{A, B} {
		tc.createBucket(0, "rep")
		if _, err := tc.procs[0].client().PutBucketVersioning(context.Background(), &s3.PutBucketVersioningInput{Bucket: aws.String("rep"),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
			t.Fatal(err)
		}
	}
	B.mdc(0, "link", "ab", "--endpoint", A.procs[1].URL(), "--secret-file", "-")
	A.mdc(0, "link", "ab", "--endpoint", B.procs[2].URL(), "--secret-file", "-")

	var wg sync.WaitGroup
	var failed atomic.Int64
	for side, tc := range []*testCluster{A, B} {
		for n := 0; n < 3; n++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := tc.procs[n].client()
				for i := 0; i < 40; i++ {
					k := fmt.Sprintf("k/%d", (i*7+n)%25)
					var err error
					if i%5 == 4 {
						_, err = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("rep"), Key: aws.String(k)})
					} else {
						_, err = c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("rep"), Key: aws.String(k),
							Body: strings.NewReader(fmt.Sprintf("side %d node %d op %d", side, n, i))})
					}
					if err != nil {
						failed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d writes failed", f)
	}
	ca, cb := A.procs[0].client(), B.procs[1].client()
	converge(t, 60*time.Second, ca, cb, "rep")

	// A node marked out with a queue.
	A.mdc(0, "pause", "ab")
	for i := 0; i < 60; i++ {
		put(t, ca, "rep", fmt.Sprintf("out/%d", i), "queued")
	}
	A.procs[2].Kill()
	if out, err := A.admin(0, "mark", "node3", "out"); err != nil {
		t.Fatalf("mark out: %v\n%s", err, out)
	}
	A.mdc(0, "resume", "ab")
	proctest.WaitFor(t, 60*time.Second, func() error {
		n, err := count(cb, "rep", "out/")
		if err != nil || n != 60 {
			return fmt.Errorf("%d of 60 on b (%v)", n, err)
		}
		return nil
	})
	converge(t, 30*time.Second, ca, cb, "rep")
}
