package browser_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testutil/browser"
)

// TestBrowser checks the harness itself: a page whose script fills an element late, a
// file input, and a script's value.
func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html><p id="out">wait</p><input id="f" type="file">
<script>setTimeout(() => { document.getElementById("out").textContent = "ready" }, 100)</script>`))
	}))
	defer srv.Close()
	b := browser.New(t, 20*time.Second)
	b.Navigate(srv.URL)
	if got := b.WaitText("#out", 5*time.Second, func(s string) bool { return s == "ready" }); got != "ready" {
		t.Fatalf("text %q", got)
	}
	f := filepath.Join(t.TempDir(), "hello.txt")
	os.WriteFile(f, []byte("hello"), 0o644)
	b.SetFiles("#f", f)
	name, err := browser.Eval[string](b, `document.getElementById("f").files[0].name`)
	if err != nil || name != "hello.txt" {
		t.Fatalf("file input: %q, %v", name, err)
	}
	n, err := browser.Eval[int](b, `Promise.resolve(6*7)`)
	if err != nil || n != 42 {
		t.Fatalf("eval: %d, %v", n, err)
	}
	if png := b.Screenshot(); !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG: % x", png[:min(8, len(png))])
	}
	if !strings.HasPrefix(b.Location(), srv.URL) {
		t.Fatalf("location %s", b.Location())
	}
}
