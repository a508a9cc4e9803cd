package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// NBD over TLS end to end: a node started with --nbd-tls require, a client certificate
// issued by cairn volume client-cert, qemu-io and nbdinfo over TLS with it; a plain
// client, a certificate for another volume, and an issue through a node without the CA
// key are refused.
func TestVolumeNBDTLS(t *testing.T) {
	tool(t, "qemu-io")
	tool(t, "nbdinfo")
	tc := startCluster(t, 1, "--nbd-listen", "127.0.0.1:0", "--nbd-tls", "require", "--replicas", "1")
	tc.add("--nbd-listen", "127.0.0.1:0", "--nbd-tls", "require", "--roles", "gateway,storage")
	proctest.WaitFor(t, 20*time.Second, func() error { // certificates are recorded from feature level 10
		if st := tc.status(0); st.Level < 10 {
			return fmt.Errorf("the map is at feature level %d", st.Level)
		}
		return nil
	})
	tc.mustVolume(0, "create", "vm1", "--size", "8MiB")
	tc.mustVolume(0, "create", "vm2", "--size", "8MiB")
	addr := tc.procs[0].NBDAddr()
	if v := tc.mustVolume(0, "attach", "vm1"); v.URI != "nbds://"+addr+"/vm1" {
		t.Fatalf("attach: URI %q, want nbds://", v.URI)
	}
	dir := filepath.Join(t.TempDir(), "hv1")
	if out, err := tc.volume(1, "client-cert", "hv1", "--out", dir); err == nil || !strings.Contains(out, "does not hold the cluster CA key") {
		t.Fatalf("client-cert through a node without the manager role: %v\n%s", err, out)
	}
	out, err := tc.volume(0, "client-cert", "hv1", "--volumes", "vm1", "--out", dir)
	if err != nil {
		t.Fatalf("client-cert: %v\n%s", err, out)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("client-cert printed the key:\n%s", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "client-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client-key.pem: %v %v", fi, err)
	}
	vm2dir := filepath.Join(t.TempDir(), "hv2")
	if out, err := tc.volume(0, "client-cert", "hv2", "--volumes", "vm2", "--out", vm2dir); err != nil {
		t.Fatalf("client-cert: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "client-cert", "hv1", "--out", dir); err == nil {
		t.Errorf("client-cert overwrote a key:\n%s", out)
	}
	host, port, _ := net.SplitHostPort(addr)
	opts := func(d string) []string {
		return []string{"--object", "tls-creds-x509,id=tls0,dir=" + d + ",endpoint=client", "--image-opts",
			"driver=nbd,host=" + host + ",port=" + port + ",export=vm1,tls-creds=tls0"}
	}
	qio := func(d string, cmds ...string) (string, error) {
		args := opts(d)
		for _, c := range cmds {
			args = append(args, "-c", c)
		}
		out, err := exec.Command(tool(t, "qemu-io"), args...).CombinedOutput()
		return string(out), err
	}
	if out, err := qio(dir, "write -P 0x6b 65536 131072", "flush", "read -P 0x6b 65536 131072", "read -P 0 0 65536"); err != nil || strings.Contains(out, "failed") {
		t.Fatalf("qemu-io over TLS: %v\n%s", err, out)
	}
	if out, err := exec.Command(tool(t, "nbdinfo"), "nbds://"+addr+"/vm1?tls-certificates="+dir).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "export-size: 8388608") || !strings.Contains(string(out), "with TLS") {
		t.Errorf("nbdinfo over TLS: %v\n%s", err, out)
	}
	for name, args := range map[string][]string{
		"plain":                         {"nbdinfo", "nbd://" + addr + "/vm1"},
		"plain qemu-io":                 {"qemu-io", "-f", "raw", "-c", "write -P 0x11 0 4096", "nbd://" + addr + "/vm1"},
		"certificate of another volume": append(append([]string{"qemu-io"}, opts(vm2dir)...), "-c", "write -P 0x11 0 4096"),
	} {
		if out, err := exec.Command(tool(t, args[0]), args[1:]...).CombinedOutput(); err == nil {
			t.Errorf("%s: not refused\n%s", name, out)
		}
	}
	// Nothing the refused clients sent reached the volume: read it back over TLS.
	if out, err := qio(dir, "read -P 0 0 65536", "read -P 0x6b 65536 131072"); err != nil || strings.Contains(out, "failed") {
		t.Fatalf("qemu-io read back: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ca-cert.pem")); !bytes.Contains(b, []byte("BEGIN CERTIFICATE")) {
		t.Error("ca-cert.pem holds no certificate")
	}

	// Revocation: hv1 by name, hv2 (vm2, served by the second node) by serial; hv3, a
	// second certificate for vm1, keeps working. Every node refuses a revoked
	// certificate at the TLS handshake, and says so in its log.
	dir3 := filepath.Join(t.TempDir(), "hv3")
	if out, err := tc.volume(0, "client-cert", "hv3", "--volumes", "vm1", "--out", dir3); err != nil {
		t.Fatalf("client-cert hv3: %v\n%s", err, out)
	}
	addr2 := tc.procs[1].NBDAddr()
	if v := tc.mustVolume(0, "attach", "vm2", "--node", tc.procs[1].NodeID()); v.URI != "nbds://"+addr2+"/vm2" {
		t.Fatalf("attach vm2 on the second node: %+v", v)
	}
	vm2 := func() ([]byte, error) {
		return exec.Command(tool(t, "nbdinfo"), "nbds://"+addr2+"/vm2?tls-certificates="+vm2dir).CombinedOutput()
	}
	if out, err := vm2(); err != nil {
		t.Fatalf("hv2 on the second node before revocation: %v\n%s", err, out)
	}
	certs := func() map[string]server.NBDClientInfo {
		out, err := tc.volume(0, "client-cert", "list", "--json")
		if err != nil {
			t.Fatalf("client-cert list: %v\n%s", err, out)
		}
		var cs []server.NBDClientInfo
		if err := json.Unmarshal([]byte(out), &cs); err != nil {
			t.Fatalf("client-cert list: %v\n%s", err, out)
		}
		by := map[string]server.NBDClientInfo{}
		for _, c := range cs {
			by[c.Name] = c
		}
		return by
	}
	issued := certs()
	for _, n := range []string{"hv1", "hv2", "hv3"} {
		if c, ok := issued[n]; !ok || c.Revoked != nil || c.Serial == "" {
			t.Fatalf("client-cert list: %s is %+v (%v)", n, c, ok)
		}
	}
	// hv1 holds a connection open across its revocation (qemu-io reading commands from
	// its standard input): the node closes it, and its next read fails.
	held := exec.Command(tool(t, "qemu-io"), opts(dir)...)
	heldIn, err := held.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	heldOut, err := held.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	held.Stderr = held.Stdout
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Process.Kill(); held.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(heldOut)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	heldRead := func() string {
		t.Helper()
		fmt.Fprintln(heldIn, "read -P 0x6b 65536 4096")
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "qemu-io exited"
				}
				if strings.Contains(l, "read ") || strings.Contains(l, "failed") || strings.Contains(l, "rror") {
					return l
				}
			case <-time.After(30 * time.Second):
				t.Fatal("qemu-io answered nothing within 30 s")
			}
		}
	}
	if l := heldRead(); !strings.Contains(l, "read 4096/4096 bytes") {
		t.Fatalf("qemu-io holding a connection: %s", l)
	}
	if out, err := tc.volume(0, "client-cert", "revoke", "--name", "hv1"); err != nil || !strings.Contains(out, "revoked 1") {
		t.Fatalf("revoke --name hv1: %v\n%s", err, out)
	}
	proctest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(tc.procs[0].Output(), "closed a connection whose client certificate is no longer accepted") {
			return errors.New("the node has not closed hv1's connection")
		}
		return nil
	})
	if l := heldRead(); strings.Contains(l, "read 4096/4096 bytes") {
		t.Errorf("hv1's connection opened before its revocation still reads: %s", l)
	}
	if out, err := tc.volume(1, "client-cert", "revoke", strings.ToUpper(issued["hv2"].Serial)); err != nil || !strings.Contains(out, "revoked 1") {
		t.Fatalf("revoke hv2's serial through the second node: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "client-cert", "revoke", "--name", "nobody"); err == nil {
		t.Errorf("revoke of an unknown name:\n%s", out)
	}
	if out, err := qio(dir, "read -P 0x6b 65536 131072"); err == nil && !strings.Contains(out, "failed") {
		t.Errorf("hv1's certificate still opens vm1 after its revocation:\n%s", out)
	}
	if out, err := vm2(); err == nil {
		t.Errorf("hv2's certificate still opens vm2 after its revocation:\n%s", out)
	}
	if out, err := qio(dir3, "write -P 0x3c 0 4096", "flush", "read -P 0x3c 0 4096", "read -P 0x6b 65536 131072"); err != nil || strings.Contains(out, "failed") {
		t.Fatalf("hv3, not revoked: %v\n%s", err, out)
	}
	for i, serial := range []string{issued["hv1"].Serial, issued["hv2"].Serial} {
		p := tc.procs[i]
		if log := p.Output(); !strings.Contains(log, "serial "+serial+") was revoked") {
			t.Errorf("%s logged no refusal of the revoked certificate %s", p.Name(), serial)
		}
	}
	after := certs()
	if after["hv1"].Revoked == nil || after["hv2"].Revoked == nil || after["hv3"].Revoked != nil {
		t.Errorf("client-cert list after the revocations: %+v", after)
	}
	if out, err := tc.volume(0, "client-cert", "list"); err != nil || !strings.Contains(out, "revoked 20") || !strings.Contains(out, "hv3") {
		t.Errorf("client-cert list: %v\n%s", err, out)
	}
}
