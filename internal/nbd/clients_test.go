package nbd

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tool returns the path of a client program; make deps installs them (Debian's
// qemu-utils, libnbd-bin and fio).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing: install Debian's qemu-utils, libnbd-bin and fio (make deps-apt does)", name)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The NBD clients of qemu, libnbd and fio work with the server.
func TestClients(t *testing.T) {
	const size = 16 << 20
	addr, dir, _ := startServer(t, func(dir string) {
		writeFile(t, filepath.Join(dir, "disk"), make([]byte, size))
		writeFile(t, filepath.Join(dir, "ro-disk"), bytes.Repeat([]byte{7}, 1<<20))
	})
	uri := "nbd://" + addr + "/disk"
	src := filepath.Join(t.TempDir(), "src.img")
	img := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 4096 {
		if rng.IntN(3) != 0 { // leave some blocks zero
			for j := i; j < i+4096; j += 8 {
				v := rng.Uint64()
				for k := range 8 {
					img[j+k] = byte(v >> (8 * k))
				}
			}
		}
	}
	writeFile(t, src, img)

	t.Run("nbdinfo", func(t *testing.T) {
		out := run(t, "nbdinfo", "--list", "nbd://"+addr)
		if !strings.Contains(out, "disk") || !strings.Contains(out, "ro-disk") {
			t.Errorf("nbdinfo --list:\n%s", out)
		}
		var info struct {
			Exports []struct {
				Name     string `json:"export-name"`
				Size     int64  `json:"export-size"`
				ReadOnly bool   `json:"is_read_only"`
				MinBlock int64  `json:"block_size_minimum"`
				MaxBlock int64  `json:"block_size_maximum"`
			} `json:"exports"`
		}
		if err := json.Unmarshal([]byte(run(t, "nbdinfo", "--json", "nbd://"+addr+"/ro-disk")), &info); err != nil {
			t.Fatal(err)
		}
		if len(info.Exports) != 1 || info.Exports[0].Size != 1<<20 || !info.Exports[0].ReadOnly || info.Exports[0].MaxBlock != 1<<20 {
			t.Errorf("nbdinfo --json: %+v", info)
		}
	})
	t.Run("qemu-img", func(t *testing.T) {
		run(t, "qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, uri)
		run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", src, uri)
		b, err := os.ReadFile(filepath.Join(dir, "disk"))
		if err != nil || !bytes.Equal(b, img) {
			t.Fatal("the export's file differs from the image written")
		}
		out := run(t, "qemu-img", "info", "-f", "raw", uri)
		if !strings.Contains(out, "16 MiB") {
			t.Errorf("qemu-img info:\n%s", out)
		}
	})
	t.Run("nbdcopy", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "copy.img")
		run(t, "nbdcopy", uri, dst)
		b, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(b, img) {
			t.Fatal("nbdcopy's copy differs")
		}
	})
	t.Run("qemu-io", func(t *testing.T) {
		out := run(t, "qemu-io", "-f", "raw",
			"-c", "write -P 0xab 4096 65536",
			"-c", "write -z 1048576 8192",
			"-c", "write -f -P 0xcd 2097152 512",
			"-c", "flush",
			"-c", "read -P 0xab 4096 65536",
			"-c", "read -P 0 1048576 8192",
			"-c", "read -P 0xcd 2097152 512",
			"-c", "discard 4194304 65536",
			uri)
		if strings.Contains(out, "error") || strings.Contains(out, "Pattern verification failed") {
			t.Errorf("qemu-io:\n%s", out)
		}
		ro, err := exec.Command(tool(t, "qemu-io"), "-f", "raw", "-c", "write -P 1 0 4096", "nbd://"+addr+"/ro-disk").CombinedOutput()
		if err == nil && !strings.Contains(string(ro), "failed") && !strings.Contains(string(ro), "ermission") && !strings.Contains(string(ro), "read-only") {
			t.Errorf("qemu-io wrote to a read-only export:\n%s", ro)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "ro-disk"))
		if !bytes.Equal(b, bytes.Repeat([]byte{7}, 1<<20)) {
			t.Error("the read-only export changed")
		}
	})
	t.Run("fio verify", func(t *testing.T) {
		out := run(t, "fio", "--name=verify", "--ioengine=nbd", "--uri="+uri, "--rw=randwrite", "--bsrange=4k-256k",
			"--size=8m", "--iodepth=16", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--numjobs=1", "--verify_state_save=0")
		if !strings.Contains(out, "err= 0") {
			t.Errorf("fio:\n%s", out)
		}
	})
}
