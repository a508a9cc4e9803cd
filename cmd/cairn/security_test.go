package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminPprofAndFileModes: Go's profiles are not served on the admin address unless
// --pprof asks for them (they need no authentication), secrets readable by other users
// are warned about at start, and the data directory is created private.
func TestAdminPprofAndFileModes(t *testing.T) {
	skipShort(t)
	dir := filepath.Join(t.TempDir(), "data")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(testClusterSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, dir, "--cluster-secret-file", secret)
	get := func(path string) int {
		resp, err := http.Get("http://" + p.AdminAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("/debug/pprof/"); st != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", st)
	}
	if st := get("/health"); st != http.StatusOK {
		t.Errorf("/health: %d", st)
	}
	if out := p.Output(); !strings.Contains(out, secret+" is readable by other users") {
		t.Errorf("no warning about the secret file readable by others:\n%s", out)
	}
	for _, d := range []string{dir, filepath.Join(dir, "segments")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want mode 0700", d, fi.Mode().Perm(), err)
		}
	}
	p.Restart("--pprof")
	if st := get("/debug/pprof/"); st != http.StatusOK {
		t.Errorf("/debug/pprof/ with --pprof: %d, want 200", st)
	}
}
