package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/server"
)

// The files of an NBD client's TLS directory, named as qemu's tls-creds-x509
// (endpoint=client) and libnbd's tls-certificates read them.
const (
	nbdCAFile   = "ca-cert.pem"
	nbdCertFile = "client-cert.pem"
	nbdKeyFile  = "client-key.pem"
)

// volumeClientCert is cairn volume client-cert: a key pair made here (the private key
// never leaves this machine), its certificate signed by the cluster CA through the
// admin API, and the three files written into out.
func volumeClientCert(c *adminClient, name, out, volumes, valid string, asJSON bool, stdout io.Writer) error {
	if out == "" {
		return fmt.Errorf("volume: client-cert needs --out DIR (the directory qemu's tls-creds-x509 dir= and libnbd's tls-certificates= name)")
	}
	if volumes == "" {
		volumes = name
	}
	if name == "list" || name == "revoke" {
		return fmt.Errorf("volume: client-cert %s: the name is taken by the subcommand (cairn volume client-cert %s)", name, name)
	}
	keyPath := filepath.Join(out, nbdKeyFile)
	if _, err := os.Stat(keyPath); err == nil {
		return fmt.Errorf("volume: %s exists: give another --out, or remove the directory's certificate files first", keyPath)
	}
	key, err := nodetls.NewKey()
	if err != nil {
		return err
	}
	csr, err := nodetls.NewNBDClientCSR(key, name)
	if err != nil {
		return fmt.Errorf("volume: client-cert %s: %w", name, err)
	}
	q := url.Values{"name": {name}, "volumes": {volumes}}
	if valid != "" {
		q.Set("valid", valid)
	}
	body, err := c.doSigned(http.MethodPost, "volume-client-cert?"+q.Encode(), csr)
	if err != nil {
		return err
	}
	var ans server.NBDClientCert
	if err := json.Unmarshal(body, &ans); err != nil {
		return fmt.Errorf("volume: client-cert: malformed answer: %w", err)
	}
	// The answer is authenticated (signed body); check anyway that it is what was asked.
	ca, err := nodetls.ParseCA([]byte(ans.CA), nil)
	if err != nil {
		return fmt.Errorf("volume: client-cert: the answer's CA: %w", err)
	}
	b, _ := pem.Decode([]byte(ans.Cert))
	if b == nil {
		return fmt.Errorf("volume: client-cert: the answer holds no certificate")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return fmt.Errorf("volume: client-cert: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("volume: client-cert: the certificate does not verify against the cluster CA: %w", err)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return fmt.Errorf("volume: client-cert: the certificate is not for the key made here")
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return fmt.Errorf("volume: client-cert: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{nbdKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600},
		{nbdCertFile, []byte(ans.Cert), 0o644},
		{nbdCAFile, []byte(ans.CA), 0o644},
	} {
		if err := os.WriteFile(filepath.Join(out, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("volume: client-cert: %w", err)
		}
	}
	if asJSON {
		return printJSON(stdout, map[string]any{"name": ans.Name, "volumes": ans.Volumes, "serial": ans.Serial, "not_after": ans.NotAfter, "dir": out, "recorded": ans.Recorded})
	}
	abs, _ := filepath.Abs(out)
	fmt.Fprintf(stdout, "NBD client certificate %q for volumes %s, valid until %s (serial %s)\n", ans.Name, strings.Join(ans.Volumes, ","), ans.NotAfter.UTC().Format(time.RFC3339), ans.Serial)
	if !ans.Recorded {
		fmt.Fprintf(stdout, "not recorded in the cluster map (it is below feature level 10): it is not listed, and can be revoked only by its serial\n")
	}
	fmt.Fprintf(stdout, "wrote %s/{%s,%s,%s} (the key 0600; keep it on this machine)\n", abs, nbdCAFile, nbdCertFile, nbdKeyFile)
	fmt.Fprintf(stdout, "nbdinfo 'nbds://HOST:PORT/VOLUME?tls-certificates=%s'\n", abs)
	fmt.Fprintf(stdout, "qemu-img info --object tls-creds-x509,id=tls0,dir=%s,endpoint=client --image-opts driver=nbd,host=HOST,port=PORT,export=VOLUME,tls-creds=tls0\n", abs)
	return nil
}

// doSigned is doBody for an answer whose body is signed (wire.HdrBodySum among the signed
// headers): it returns the body once it matches.
func (c *adminClient) doSigned(method, path string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.send(ctx, method, "/admin/v1/"+path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return rpc.ReadSignedBody(resp, 64<<10)
}

// volumeClientCertList is cairn volume client-cert list.
func volumeClientCertList(c *adminClient, asJSON bool, stdout io.Writer) error {
	var cs []server.NBDClientInfo
	if err := c.do(http.MethodGet, "volume-client-certs", &cs); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, cs)
	}
	printNBDClients(stdout, cs)
	return nil
}

// volumeClientCertRevoke is cairn volume client-cert revoke.
func volumeClientCertRevoke(c *adminClient, serial, name string, asJSON bool, stdout io.Writer) error {
	q := url.Values{}
	if serial != "" {
		q.Set("serial", serial)
	} else {
		q.Set("name", name)
	}
	var cs []server.NBDClientInfo
	if err := c.do(http.MethodPost, "volume-client-cert/revoke?"+q.Encode(), &cs); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, cs)
	}
	fmt.Fprintf(stdout, "revoked %d NBD client certificate(s); every NBD listener refuses them at the TLS handshake\n", len(cs))
	printNBDClients(stdout, cs)
	return nil
}

func printNBDClients(w io.Writer, cs []server.NBDClientInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERIAL\tNAME\tVOLUMES\tISSUED\tEXPIRES\tSTATE")
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, c := range cs {
		state := "issued"
		if c.Revoked != nil {
			state = "revoked " + at(c.Revoked)
		}
		name, vols := c.Name, strings.Join(c.Volumes, ",")
		if name == "" {
			name = "-"
		}
		if vols == "" {
			vols = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Serial, name, vols, at(c.Issued), at(c.NotAfter), state)
	}
	tw.Flush()
}
