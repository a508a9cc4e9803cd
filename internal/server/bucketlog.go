package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/s3api"
)

// bucketLogs is S3 server access logging (PutBucketLogging): a node appends a record in
// S3's access log format for every request it answers on a bucket with logging enabled,
// to a spool file per bucket in DATA/bucket-logs (synced every second), and every
// interval it delivers each spool as one object into the bucket's target, under its
// target prefix. A spool is renamed before it is sent and removed only once the object
// is written, so every record that reached the spool is delivered at least once (a
// delivery that wrote the object but crashed before removing the spool is sent again).
// Deliveries write through the gateway, not the S3 API: they are not logged themselves.
type bucketLogs struct {
	dir  string
	node string
	gw   *gateway.Gateway
	maps func() *clustermap.Map
	log  *slog.Logger

	mu       sync.Mutex
	files    map[string]*os.File // open spools by source bucket
	dirty    bool
	appended int64 // bytes appended to the open spools
	// synced is the bytes of the open spools made durable (cairn_bucket_log_spooled_bytes).
	synced atomic.Int64
}

func openBucketLogs(dir, node string, gw *gateway.Gateway, maps func() *clustermap.Map, log *slog.Logger) (*bucketLogs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return &bucketLogs{dir: dir, node: node, gw: gw, maps: maps, log: log.With("component", "bucket-logs"), files: map[string]*os.File{}}, nil
}

// config returns where bucket's records go, if it has logging enabled.
func (l *bucketLogs) config(bucket string) (s3api.LoggingConfig, bool) {
	var c s3api.LoggingConfig
	b, ok := l.maps().Buckets[bucket]
	if !ok || b.Config[s3api.LoggingKind] == "" {
		return c, false
	}
	if json.Unmarshal([]byte(b.Config[s3api.LoggingKind]), &c) != nil || c.TargetBucket == "" {
		return c, false
	}
	return c, true
}

// Record appends rec to its bucket's spool if the bucket has logging enabled.
func (l *bucketLogs) Record(rec s3api.AccessRecord) {
	if rec.Bucket == "" {
		return
	}
	if _, ok := l.config(rec.Bucket); !ok {
		return
	}
	owner := l.maps().Buckets[rec.Bucket].Owner
	line := formatS3Log(rec, owner)
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.files[rec.Bucket]
	if !ok {
		var err error
		f, err = os.OpenFile(filepath.Join(l.dir, spoolName(rec.Bucket)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			l.log.Error("cannot open a bucket log spool: records are lost", "bucket", rec.Bucket, "err", err)
			return
		}
		l.files[rec.Bucket] = f
	}
	if _, err := f.WriteString(line); err != nil {
		l.log.Error("cannot append to a bucket log spool: a record is lost", "bucket", rec.Bucket, "err", err)
		return
	}
	l.appended += int64(len(line))
	l.dirty = true
}

// spoolName is a bucket's spool file (bucket names are safe file names).
func spoolName(bucket string) string { return bucket + ".log" }

// sync makes what was appended durable.
func (l *bucketLogs) sync() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.dirty {
		return
	}
	for b, f := range l.files {
		if err := f.Sync(); err != nil {
			l.log.Error("cannot sync a bucket log spool", "bucket", b, "err", err)
			return
		}
	}
	l.dirty = false
	l.synced.Store(l.appended)
}

// deliver sends every spool (and what an earlier delivery left) to its target.
func (l *bucketLogs) deliver(ctx context.Context) {
	l.mu.Lock()
	for b, f := range l.files { // new records go to new spools from now
		f.Sync()
		f.Close()
		os.Rename(filepath.Join(l.dir, spoolName(b)), filepath.Join(l.dir, fmt.Sprintf("%s.%d.sending", b, time.Now().UnixNano())))
	}
	clear(l.files)
	l.dirty, l.appended = false, 0
	l.synced.Store(0)
	l.mu.Unlock()
	// Spools of a node that stopped before it could rename them.
	names, _ := filepath.Glob(filepath.Join(l.dir, "*.log"))
	for _, p := range names {
		b := strings.TrimSuffix(filepath.Base(p), ".log")
		l.mu.Lock()
		_, open := l.files[b]
		if !open {
			os.Rename(p, filepath.Join(l.dir, fmt.Sprintf("%s.%d.sending", b, time.Now().UnixNano())))
		}
		l.mu.Unlock()
	}
	sending, _ := filepath.Glob(filepath.Join(l.dir, "*.sending"))
	for _, p := range sending {
		if ctx.Err() != nil {
			return
		}
		base := filepath.Base(p)
		bucket := base[:strings.IndexByte(base, '.')]
		if err := l.send(ctx, bucket, p); err != nil {
			l.log.Warn("could not deliver a bucket's access log records; trying again at the next interval", "bucket", bucket, "err", err)
		}
	}
}

// send writes the records of one spool file as an object of the bucket's target, and
// removes the file once it is written. Records of a bucket whose logging was turned off
// are dropped.
func (l *bucketLogs) send(ctx context.Context, bucket, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c, ok := l.config(bucket)
	if !ok || len(data) == 0 {
		return os.Remove(path)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	key := c.TargetPrefix + time.Now().UTC().Format("2006-01-02-15-04-05-") + strings.ToUpper(hex.EncodeToString(rnd[:]))
	meta := &object.Object{ContentType: "text/plain"}
	if _, err := l.gw.PutObject(ctx, c.TargetBucket, key, meta, bytes.NewReader(data), int64(len(data)), object.PutOptions{}); err != nil {
		return err
	}
	return os.Remove(path)
}

// run syncs the spools every second and delivers them every interval until ctx ends,
// then syncs and closes them (what is left goes at the next start).
func (l *bucketLogs) run(ctx context.Context, interval time.Duration) {
	sync := time.NewTicker(time.Second)
	defer sync.Stop()
	del := time.NewTicker(interval)
	defer del.Stop()
	for {
		select {
		case <-ctx.Done():
			l.mu.Lock()
			for _, f := range l.files {
				f.Sync()
				f.Close()
			}
			clear(l.files)
			l.mu.Unlock()
			return
		case <-sync.C:
			l.sync()
		case <-del.C:
			l.deliver(ctx)
		}
	}
}

// formatS3Log formats rec as a line of S3's server access log format.
func formatS3Log(rec s3api.AccessRecord, owner string) string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	quote := func(s string) string {
		if s == "" {
			return "-"
		}
		return strconv.Quote(s)
	}
	if owner == "" {
		owner = clustermap.RootAccount
	}
	requester := "-"
	if rec.User != "" {
		requester = canonicalID(rec.User)
	}
	host, _, _ := strings.Cut(rec.Remote, ":")
	if strings.HasPrefix(rec.Remote, "[") {
		host = strings.TrimPrefix(rec.Remote[:strings.LastIndexByte(rec.Remote, ']')], "[")
	}
	sigv := "-"
	switch rec.AuthType {
	case "AuthHeader", "QueryString", "POST":
		sigv = "SigV4"
	}
	tlsv := "-"
	if rec.TLS {
		tlsv = "TLSv1.2+"
	}
	bytesSent := "-"
	if rec.BytesOut > 0 {
		bytesSent = strconv.FormatInt(rec.BytesOut, 10)
	}
	fields := []string{
		canonicalID(owner), rec.Bucket, rec.Time.UTC().Format("[02/Jan/2006:15:04:05 -0700]"), dash(host), requester,
		rec.RequestID, logOperation(rec), dash(rec.Key), strconv.Quote(rec.Method + " " + rec.URI + " HTTP/1.1"),
		strconv.Itoa(rec.Status), dash(rec.Error), bytesSent, "-", strconv.FormatInt(rec.Duration.Milliseconds(), 10), "-",
		quote(rec.Referer), quote(rec.UserAgent), "-", rec.RequestID, sigv, "-", dash(rec.AuthType), dash(rec.Host), tlsv, "-", "-",
	}
	return strings.Join(fields, " ") + "\n"
}

// canonicalID is a user's canonical ID as the S3 API shows it (s3api's owners).
func canonicalID(user string) string {
	sum := sha256.Sum256([]byte("cairn-user:" + user))
	return hex.EncodeToString(sum[:])
}

// logOperation names the operation as S3's access log does: REST.METHOD.RESOURCE.
func logOperation(rec s3api.AccessRecord) string {
	res := ""
	switch rec.Op {
	case "GetObject", "HeadObject", "PutObject", "DeleteObject", "CopyObject":
		res = "OBJECT"
	case "CreateMultipartUpload":
		res = "UPLOADS"
	case "UploadPart", "UploadPartCopy":
		res = "PART"
	case "CompleteMultipartUpload", "AbortMultipartUpload", "ListParts":
		res = "UPLOAD"
	case "PostObject":
		return "REST.POST.OBJECT"
	case "DeleteObjects":
		return "REST.POST.MULTI_OBJECT_DELETE"
	case "ListObjects", "ListObjectsV2", "HeadBucket", "CreateBucket", "DeleteBucket":
		res = "BUCKET"
	default:
		res = strings.ToUpper(strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(rec.Op, "Get"), "Put"), "Delete"), "Bucket"))
	}
	return "REST." + rec.Method + "." + res
}
