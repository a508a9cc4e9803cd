package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/wire"
)

// fixedTLS is an rpc.TLSSource with one certificate (nil: none) and TLS required.
type fixedTLS struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func (f fixedTLS) get() *tls.Certificate { return f.cert }
func (f fixedTLS) ServerConfig() *tls.Config {
	return nil
}
func (f fixedTLS) ClientConfig() *tls.Config {
	if f.cert == nil {
		return nil
	}
	return nodetls.ClientConfig(f.get, f.pool)
}
func (f fixedTLS) Required() bool { return true }

// enrolAs asks the node at addr for a certificate for node id with the cluster secret s,
// as a joining node does (TLS without a client certificate).
func enrolAs(ctx context.Context, s *rpc.Secret, addr, id string, trusted *nodetls.CA) (*tls.Certificate, error) {
	key, err := nodetls.NewKey()
	if err != nil {
		return nil, err
	}
	der, err := nodetls.NewCSR(key, id, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(wire.EnrolRequest{Node: id, CSR: der})
	c := &rpc.Client{Secret: s, Node: id, HTTP: &http.Client{Transport: rpc.NewEnrolTransport(nil)}}
	resp, err := c.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathEnrol, Body: bytes.NewReader(body), Size: int64(len(body))})
	if err != nil {
		return nil, err
	}
	data, err := rpc.ReadSignedBody(resp, 64<<10)
	if err != nil {
		return nil, err
	}
	var ans wire.EnrolAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return nil, err
	}
	cert, _, err := nodetls.CheckAnswer(ans, key, id, trusted, time.Now())
	return cert, err
}

// A new cluster runs its internode traffic (Raft and HTTP) over mutual TLS with the CA its
// first node made: objects written through any node read back through every node, and
// whoever lacks the cluster's CA certificate, or the cluster secret, gets nothing further
// than enrolment: a plain connection, a certificate of another CA and a certificate
// signed as another node are refused, and enrolment takes only the cluster secret.
func TestInternodeTLS(t *testing.T) {
	skipShort(t)
	start := time.Now()
	tc := startCluster(t, 3)
	tc.createBucket(0, "mtls")
	ctx := context.Background()
	bodies := map[string][]byte{"small": bytes.Repeat([]byte("s"), 4<<10), "streamed": bytes.Repeat([]byte("L"), 300<<10)}
	for i, p := range tc.procs {
		for name, b := range bodies {
			key := fmt.Sprintf("%s-%d", name, i)
			if _, err := p.client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mtls"), Key: aws.String(key), Body: bytes.NewReader(b)}); err != nil {
				t.Fatalf("put %s through node %d: %v", key, i, err)
			}
		}
	}
	for i, p := range tc.procs {
		for j := range tc.procs {
			for name, want := range bodies {
				got, err := getBody(ctx, p.client(), "mtls", fmt.Sprintf("%s-%d", name, j))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("node %d reads %s-%d: %v (%d bytes)", i, name, j, err, len(got))
				}
			}
		}
	}
	out, err := tc.admin(0, "internode-tls")
	if err != nil || !strings.Contains(out, "required") || strings.Count(out, " ok ") != 3 {
		t.Fatalf("cairn admin internode-tls: %v\n%s", err, out)
	}
	t.Logf("cluster up, objects through every node: %v", time.Since(start).Round(time.Millisecond))

	caPEM, err := os.ReadFile(filepath.Join(tc.procs[0].DataDir(), "internode", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	clusterCA, err := nodetls.ParseCA(caPEM, nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := rpc.NewSecret(testClusterSecret)
	wrong, _ := rpc.NewSecret("not-the-cluster-secret-0123456789")
	otherCA, _ := nodetls.NewCA("an attacker's CA", time.Now())
	foreign, err := enrolAs(ctx, secret, tc.addrs[0], "node9", nil)
	if err != nil {
		t.Fatalf("enrolment with the cluster secret: %v", err)
	}
	if _, err := nodetls.Verify(clusterCA, foreign.Leaf, time.Now()); err != nil {
		t.Fatalf("the certificate enrolment gave: %v", err)
	}
	strangerKey, _ := nodetls.NewKey()
	der, _ := nodetls.NewCSR(strangerKey, "node9", []string{"127.0.0.1"})
	csr, _ := nodetls.ParseCSR(der, "node9")
	p, _ := otherCA.Sign(csr, "node9", time.Now(), 0)
	stranger, _, err := nodetls.CheckAnswer(wire.EnrolAnswer{Cert: string(p), CA: string(otherCA.CertPEM)}, strangerKey, "node9", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	client := func(s *rpc.Secret, node string, tr *http.Transport) *rpc.Client {
		return &rpc.Client{Secret: s, Node: node, HTTP: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	}
	mapReq := &rpc.Request{Method: http.MethodGet, Addr: tc.addrs[0], Path: wire.PathMap}
	cases := []struct {
		name string
		do   func() error
		want string // in the error; "" for success
		log  string // in node1's log
	}{
		{"a node of the cluster CA", func() error {
			return client(secret, "node9", (&rpc.Dialer{Secret: secret, TLS: fixedTLS{foreign, clusterCA.Pool()}}).Transport()).DoJSON(ctx, mapReq, nil)
		}, "", ""},
		{"plain HTTP", func() error {
			return client(secret, "node9", rpc.NewTransport()).DoJSON(ctx, mapReq, nil)
		}, "", "refused a plain internode connection"},
		{"plain raft", func() error {
			c, err := secret.DialRaft(tc.addrs[0], 3*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}, "", "refused a plain internode connection"},
		{"a certificate of another CA", func() error {
			return client(secret, "node9", (&rpc.Dialer{Secret: secret, TLS: fixedTLS{stranger, clusterCA.Pool()}}).Transport()).DoJSON(ctx, mapReq, nil)
		}, "", "handshake failed"},
		{"raft with a certificate of another CA", func() error {
			c, err := (&rpc.Dialer{Secret: secret, TLS: fixedTLS{stranger, clusterCA.Pool()}}).DialRaft(tc.addrs[0], 3*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}, "", "handshake failed"},
		{"no certificate, with the secret: only enrolment", func() error {
			return client(secret, "node9", rpc.NewEnrolTransport(nil)).DoJSON(ctx, mapReq, nil)
		}, "client certificate", "only enrolment is open"},
		{"no CA and no secret: enrolment refused", func() error {
			_, err := enrolAs(ctx, wrong, tc.addrs[0], "node9", nil)
			return err
		}, "bad internode signature", "path=/internal/v1/enrol"},
		{"signed as another node than the certificate's", func() error {
			return client(secret, "node2", (&rpc.Dialer{Secret: secret, TLS: fixedTLS{foreign, clusterCA.Pool()}}).Transport()).DoJSON(ctx, mapReq, nil)
		}, "names node", "the client certificate names node"},
		{"an enrolment answer with another CA", func() error {
			_, err := enrolAs(ctx, secret, tc.addrs[0], "node9", otherCA)
			return err
		}, "another CA", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.do()
			switch {
			case c.name == "a node of the cluster CA":
				if err != nil {
					t.Fatal(err)
				}
				return
			case err == nil:
				t.Fatal("accepted")
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("err %v, want one saying %q", err, c.want)
			case c.want == "" && errors.Is(errors.Permission, err) && strings.Contains(err.Error(), "it answered"):
				// A refusal at the HTTP layer, not at the connection: not what is asserted.
				t.Fatalf("got as far as an HTTP answer: %v", err)
			}
			if c.log != "" {
				proctest.WaitFor(t, 10*time.Second, func() error {
					data, _ := os.ReadFile(tc.procs[0].LogPath())
					if !strings.Contains(string(data), c.log) {
						return fmt.Errorf("node1's log does not say %q", c.log)
					}
					return nil
				})
			}
		})
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}
