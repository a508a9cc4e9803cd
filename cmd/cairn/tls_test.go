package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

// tlsFiles is a throwaway CA (its certificate in CAFile) and the paths a server's pair
// is written to.
type tlsFiles struct {
	ca                        *testcert.CA
	CAFile, CertFile, KeyFile string
}

func newTLSFiles(t *testing.T) *tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcert.NewCA("cairn test CA")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFiles{ca: ca, CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if err := os.WriteFile(f.CAFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue writes a new pair for 127.0.0.1 with this serial over the server's files.
func (f *tlsFiles) issue(t *testing.T, serial int64) testcert.Pair {
	t.Helper()
	p, err := f.ca.Issue(serial, "127.0.0.1", "localhost")
	if err == nil {
		err = p.Write(f.CertFile, f.KeyFile)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serial is the serial number of the certificate a new TLS connection to addr gets.
func (f *tlsFiles) serial(addr string) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, f.ca.ClientConfig())
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// s3Client is an S3 client of url trusting tc (nil: the system's CAs).
func s3Client(url string, tc *tls.Config) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), UsePathStyle: true,
		Credentials:      credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}})
}

// TestServerTLS: `cairn server --tls-cert --tls-key` serves S3 (aws-sdk-go-v2) and the
// admin API (cairn admin --ca-file, cairn bench --ca-file) over HTTPS only; SIGHUP
// reloads the pair (new connections get it), and a broken pair keeps the old one and
// logs an error.
func TestServerTLS(t *testing.T) {
	skipShort(t)
	f := newTLSFiles(t)
	f.issue(t, 10)
	dir := filepath.Join(t.TempDir(), "data")
	p := startProc(t, dir, "--tls-cert", f.CertFile, "--tls-key", f.KeyFile, "--tls-reload-interval", "-1s")
	if !strings.HasPrefix(p.URL(), "https://") || !strings.HasPrefix(p.AdminURL(), "https://") {
		t.Fatalf("URL %s, admin %s: want https", p.URL(), p.AdminURL())
	}
	if out := p.Output(); !strings.Contains(out, "S3 endpoint: https://"+p.S3Addr()) || !strings.Contains(out, "aws --endpoint-url https://") {
		t.Errorf("banner does not say https:\n%s", out)
	}
	ctx := context.Background()

	t.Run("s3", func(t *testing.T) {
		c := s3Client(p.URL(), f.ca.ClientConfig())
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("tls")}); err != nil {
			t.Fatal(err)
		}
		body := bytes.Repeat([]byte("cairn over TLS "), 70000) // 1 MiB
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tls"), Key: aws.String("a/b"), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
		got, err := getBody(ctx, c, "tls", "a/b")
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("GET: %d bytes, %v", len(got), err)
		}
		l, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("tls")})
		if err != nil || len(l.Contents) != 1 || aws.ToString(l.Contents[0].Key) != "a/b" {
			t.Fatalf("LIST: %v", err)
		}
		// Neither a client that does not trust the CA nor plain HTTP gets through.
		if _, err := s3Client(p.URL(), nil).ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("client without the CA: %v, want a certificate error", err)
		}
		if _, err := s3Client("http://"+p.S3Addr(), nil).ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
			t.Error("plain HTTP to the TLS port succeeded")
		}
	})

	t.Run("admin and bench", func(t *testing.T) {
		admin := func(args ...string) (string, error) {
			var out, errOut bytes.Buffer
			err := runAdmin(append([]string{"--data", dir}, args...), &out, &errOut)
			return out.String(), err
		}
		out, err := admin("--admin", p.AdminAddr(), "--ca-file", f.CAFile, "--json", "status")
		var st server.Status
		if err != nil || json.Unmarshal([]byte(out), &st) != nil || len(st.Nodes) != 1 {
			t.Errorf("cairn admin --ca-file status: %v\n%s", err, out)
		}
		t.Setenv("CAIRN_CA_FILE", f.CAFile)
		if _, err := admin("--admin", p.AdminAddr(), "nodes"); err != nil {
			t.Errorf("cairn admin with CAIRN_CA_FILE: %v", err)
		}
		os.Unsetenv("CAIRN_CA_FILE")
		if _, err := admin("--admin", p.AdminAddr(), "nodes"); err == nil || !strings.Contains(err.Error(), "serves HTTPS") {
			t.Errorf("cairn admin without a CA file: %v, want an error saying the address serves HTTPS", err)
		}
		if _, err := admin("--admin", p.AdminURL(), "nodes"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("cairn admin https:// without the CA: %v, want a certificate error", err)
		}
		status, stdout, stderr := runBenchCLI(t, "put", "--endpoint", p.URL(), "--ca-file", f.CAFile, "--access-key", testAccess, "--secret-key", testSecret,
			"--ops", "20", "--size", "4KiB", "--quiet")
		if status != 0 || !strings.Contains(stdout, "PUT") {
			t.Errorf("cairn bench --ca-file: exit %d\n%s\n%s", status, stdout, stderr)
		}
	})

	t.Run("reload on SIGHUP", func(t *testing.T) {
		if s, err := f.serial(p.S3Addr()); err != nil || s != "10" {
			t.Fatalf("serial %s (%v), want 10", s, err)
		}
		f.issue(t, 11)
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{p.S3Addr(), p.AdminAddr()} {
			proctest.WaitFor(t, 10*time.Second, func() error {
				s, err := f.serial(addr)
				if err == nil && s != "11" {
					err = fmt.Errorf("%s serves serial %s, want 11", addr, s)
				}
				return err
			})
		}
		// A key that is not the certificate's: the old pair stays, an ERROR says why.
		a, b := f.issue(t, 12), f.issue(t, 13)
		if err := os.WriteFile(f.CertFile, a.CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.KeyFile, b.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		proctest.WaitFor(t, 10*time.Second, func() error {
			if out := p.Output(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "TLS certificate not reloaded") {
				return fmt.Errorf("no error logged for a mismatched pair")
			}
			return nil
		})
		if s, err := f.serial(p.S3Addr()); err != nil || s != "11" {
			t.Errorf("after a broken pair: serial %s (%v), want 11 kept", s, err)
		}
		c := s3Client(p.URL(), f.ca.ClientConfig())
		if _, err := c.ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
			t.Errorf("S3 after a broken pair: %v", err)
		}
	})
}

// TestServerTLSFlags: --tls-cert and --tls-key go together.
func TestServerTLSFlags(t *testing.T) {
	for _, args := range [][]string{{"--tls-cert", "c.pem"}, {"--tls-key", "k.pem"}} {
		err := runServer(append([]string{"--data", t.TempDir()}, args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
			t.Errorf("%v: %v, want an error that both are needed", args, err)
		}
	}
}

// TestDevClusterTLS: `cairn dev cluster --tls` makes a CA in DIR/tls, its nodes serve S3
// and admin over HTTPS with a certificate it signed, and it says which CA to trust.
func TestDevClusterTLS(t *testing.T) {
	skipShort(t)
	dir := filepath.Join(t.TempDir(), "dev")
	cmd := exec.Command(proctest.Bin(t), "dev", "cluster", "--nodes", "1", "--tls", "--dir", dir, "--base-port", "0", "--clean")
	var stdout syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	proctest.WaitFor(t, 60*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			return proc.Permanent(fmt.Errorf("dev cluster exited (%v):\n%s", err, stdout.String()))
		default:
		}
		if !strings.Contains(stdout.String(), "cluster ready") {
			return fmt.Errorf("dev cluster not ready:\n%s", stdout.String())
		}
		return nil
	})
	data, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dc devCluster
	if err := json.Unmarshal(data, &dc); err != nil || len(dc.Nodes) != 1 || dc.CAFile != filepath.Join(dir, "tls", "ca.pem") {
		t.Fatalf("cluster.json: %v %s", err, data)
	}
	out := stdout.String()
	if !strings.Contains(out, "S3 https://"+dc.Nodes[0].S3) || !strings.Contains(out, "--ca-bundle "+dc.CAFile) {
		t.Errorf("banner does not say https and the CA:\n%s", out)
	}
	pem, err := os.ReadFile(dc.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("https://" + dc.Nodes[0].S3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(dc.AccessKey, dc.SecretKey, ""), RetryMaxAttempts: 1,
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}})
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String("devtls")}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAIRN_CA_FILE", dc.CAFile)
	t.Setenv("CAIRN_CLUSTER_SECRET", dc.ClusterSecret)
	var aout bytes.Buffer
	if err := runAdmin([]string{"--admin", dc.Nodes[0].Admin, "nodes"}, &aout, io.Discard); err != nil || !strings.Contains(aout.String(), dc.Nodes[0].ID) {
		t.Errorf("cairn admin with CAIRN_CA_FILE: %v\n%s", err, aout.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("dev cluster exit: %v\n%s", err, stdout.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev cluster did not stop on SIGINT")
	}
}
