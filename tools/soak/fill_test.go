package main

import (
	"os"
	"testing"
)

// A disk-full fault fills the tmpfs to the last block, the space watch does not count the
// filler, and removing it frees the space.
func TestFillTmpfs(t *testing.T) {
	dir := t.TempDir()
	if err := mountTmpfs(dir, "64m"); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("mounting a tmpfs needs root (make test runs as root in CI): %v", err)
		}
		t.Fatalf("cannot mount tmpfs as root: %v", err)
	}
	defer unmount(dir)
	n := &node{mnt: dir}
	if err := os.WriteFile(dir+"/data", make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	used0, total, ok := n.space()
	if !ok || total != 64<<20 || used0 < 5<<20 || used0 > 6<<20 {
		t.Fatalf("space before: used %d of %d (%v)", used0, total, ok)
	}
	wrote, err := n.fill()
	if err != nil || wrote < 55<<20 {
		t.Fatalf("fill: %d bytes, %v", wrote, err)
	}
	if err := os.WriteFile(dir+"/more", []byte("x"), 0o600); err == nil {
		t.Fatal("a write succeeded on a full tmpfs")
	}
	os.Remove(dir + "/more")
	if used, _, ok := n.space(); !ok || used < 5<<20 || used > 6<<20 {
		t.Fatalf("space with the filler: used %d (%v), want about %d", used, ok, used0)
	}
	if err := n.unfill(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/more", []byte("x"), 0o600); err != nil {
		t.Fatalf("write after unfill: %v", err)
	}
}
