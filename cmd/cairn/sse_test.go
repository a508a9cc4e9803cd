package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// masterKeyLine returns a line of a master key file: name and 32 random bytes.
func masterKeyLine(name string) string {
	k := make([]byte, 32)
	rand.Read(k)
	return name + " " + base64.StdEncoding.EncodeToString(k) + "\n"
}

// TestClusterSSE: on a 3-node cluster (HTTPS, one master key file for all), SSE-S3,
// SSE-C, multipart and bucket-default objects written through one node read back through
// every node, and no file in any node's data directory holds a byte string of their
// plaintext; after a key is added and SIGHUP, old and new objects read.
func TestClusterSSE(t *testing.T) {
	skipShort(t)
	keyFile := filepath.Join(t.TempDir(), "master.keys")
	if err := os.WriteFile(keyFile, []byte("# cairn master keys\n"+masterKeyLine("first")), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newTLSFiles(t)
	f.issue(t, 1)
	tc := startCluster(t, 3, "--master-key-file", keyFile, "--tls-cert", f.CertFile, "--tls-key", f.KeyFile)
	c := func(i int) *s3.Client { return s3Client(tc.procs[i].URL(), f.ca.ClientConfig()) }
	ctx := context.Background()
	if _, err := c(0).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("enc")}); err != nil {
		t.Fatal(err)
	}
	const marker = "CAIRN-SSE-PLAINTEXT-MARKER-0d5c"
	body := func(n int) []byte {
		b := bytes.Repeat([]byte(marker+" "), n/(len(marker)+1)+1)
		return b[:n]
	}
	ck := bytes.Repeat([]byte{0x5c}, 32)
	sum := md5.Sum(ck)
	ckB64, ckMD5 := base64.StdEncoding.EncodeToString(ck), base64.StdEncoding.EncodeToString(sum[:])
	objects := map[string][]byte{"s3": body(300 << 10), "small": body(3000), "c": body(200 << 10), "mp": nil, "default": body(100 << 10)}

	// The first write waits for the cluster's feature level (raised once every node runs it).
	proctest.WaitFor(t, 30*time.Second, func() error {
		_, err := c(1).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("s3"), Body: bytes.NewReader(objects["s3"]),
			ServerSideEncryption: types.ServerSideEncryptionAes256})
		return err
	})
	if _, err := c(2).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("small"), Body: bytes.NewReader(objects["small"]),
		ServerSideEncryption: types.ServerSideEncryptionAes256}); err != nil {
		t.Fatal(err)
	}
	if _, err := c(0).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("c"), Body: bytes.NewReader(objects["c"]),
		SSECustomerAlgorithm: aws.String("AES256"), SSECustomerKey: aws.String(ckB64), SSECustomerKeyMD5: aws.String(ckMD5)}); err != nil {
		t.Fatal(err)
	}
	mu, err := c(0).CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("enc"), Key: aws.String("mp"), ServerSideEncryption: types.ServerSideEncryptionAes256})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for i, n := range []int{5 << 20, 70 << 10} {
		b := body(n)
		objects["mp"] = append(objects["mp"], b...)
		up, err := c(i+1).UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("enc"), Key: aws.String("mp"), UploadId: mu.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(b)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{ETag: up.ETag, PartNumber: aws.Int32(int32(i + 1))})
	}
	if _, err := c(2).CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("enc"), Key: aws.String("mp"), UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c(1).PutBucketEncryption(ctx, &s3.PutBucketEncryptionInput{Bucket: aws.String("enc"), ServerSideEncryptionConfiguration: &types.ServerSideEncryptionConfiguration{
		Rules: []types.ServerSideEncryptionRule{{ApplyServerSideEncryptionByDefault: &types.ServerSideEncryptionByDefault{SSEAlgorithm: types.ServerSideEncryptionAes256}}}}}); err != nil {
		t.Fatal(err)
	}
	// Node 2 learns the configuration from the map: wait until its writes are encrypted.
	proctest.WaitFor(t, 20*time.Second, func() error {
		out, err := c(2).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("default"), Body: bytes.NewReader(objects["default"])})
		if err != nil {
			return err
		}
		if out.ServerSideEncryption != types.ServerSideEncryptionAes256 {
			return fmt.Errorf("a write in a default-encrypted bucket answered %q", out.ServerSideEncryption)
		}
		return nil
	})

	readAll := func(t *testing.T) {
		t.Helper()
		for i := range tc.procs {
			for key, want := range objects {
				in := &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String(key)}
				if key == "c" {
					in.SSECustomerAlgorithm, in.SSECustomerKey, in.SSECustomerKeyMD5 = aws.String("AES256"), aws.String(ckB64), aws.String(ckMD5)
				}
				out, err := c(i).GetObject(ctx, in)
				if err != nil {
					t.Fatalf("node %d, %s: %v", i, key, err)
				}
				got, err := io.ReadAll(out.Body)
				out.Body.Close()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("node %d, %s: %d bytes (%v), want %d", i, key, len(got), err, len(want))
				}
			}
		}
	}
	readAll(t)
	// A control: the same kind of body, unencrypted, is found on the disks below.
	const control = "CAIRN-SSE-CONTROL-PLAINTEXT-1e9a"
	if _, err := c(0).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("plain")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c(0).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("plain"), Key: aws.String("control"),
		Body: bytes.NewReader(bytes.Repeat([]byte(control+" "), 300<<10/len(control)))}); err != nil {
		t.Fatal(err)
	}
	_, err = c(1).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("enc"), Key: aws.String("c")})
	if err == nil || !strings.Contains(err.Error(), "InvalidRequest") {
		t.Fatalf("SSE-C object without its key: %v", err)
	}

	// Nothing on any node's disks holds the plaintext (every file: segments, the index,
	// hints, the Raft log).
	for _, p := range tc.procs {
		files, controls := 0, 0
		err := filepath.WalkDir(p.DataDir(), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // a file removed meanwhile (compaction, a finished log)
				}
				return err
			}
			if d.IsDir() {
				return nil
			}
			data, err := os.ReadFile(path)
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				return err
			}
			files++
			if bytes.Contains(data, []byte(marker)) {
				t.Errorf("%s holds plaintext of an encrypted object", path)
			}
			if bytes.Contains(data, []byte(control)) {
				controls++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if files == 0 || controls == 0 {
			t.Fatalf("%s: %d files, %d with the unencrypted control's bytes: the search sees nothing", p.DataDir(), files, controls)
		}
	}

	// Rotation: a new newest key, SIGHUP; old and new objects read on every node.
	kf, err := os.OpenFile(keyFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	kf.WriteString(masterKeyLine("second"))
	kf.Close()
	for _, p := range tc.procs {
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if !strings.Contains(p.Output(), `newest=second`) {
				return fmt.Errorf("%s has not reloaded its master keys", p.Name())
			}
			return nil
		})
	}
	objects["after-rotation"] = body(1000)
	if _, err := c(0).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("enc"), Key: aws.String("after-rotation"), Body: bytes.NewReader(objects["after-rotation"])}); err != nil {
		t.Fatal(err)
	}
	readAll(t)
}

// TestMasterKeyFileFlag: a key file inside the data directory, or a malformed one, stops
// the server before it starts.
func TestMasterKeyFileFlag(t *testing.T) {
	data := t.TempDir()
	inside := filepath.Join(data, "keys")
	os.WriteFile(inside, []byte(masterKeyLine("k")), 0o600)
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("k notbase64\n"), 0o600)
	for _, tc := range []struct{ file, want string }{
		{inside, "inside the data directory"},
		{bad, "not the base64 of 32 bytes"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	} {
		var stderr bytes.Buffer
		err := runServer([]string{"--data", data, "--master-key-file", tc.file, "--listen", "127.0.0.1:0", "--admin-listen", "off"}, io.Discard, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--master-key-file %s: %v, want an error saying %q", tc.file, err, tc.want)
		}
	}
}
