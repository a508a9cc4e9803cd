// Package browser drives a real, headless Chromium from tests: Debian's `chromium` package
// through chromedp. It is the one browser harness of cairn's tests (the presigned POST
// forms and CORS of s3api, the web console of the operations issue): it finds the binary,
// starts it with a deadline and stops it in t.Cleanup, and has the few helpers those tests
// need (load a page, wait for an element's text, set a file input, run a script, take a
// screenshot).
//
// It is not a general browser-automation library, and it starts no servers: the tests
// serve their own pages on loopback listeners.
//
// Under -short a missing chromium skips the test; otherwise it is a failure that says to
// run `make deps`, so that a CI machine without the browser cannot pass vacuously.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Binaries are the names tried, in order, on PATH: Debian's package installs `chromium`.
var Binaries = []string{"chromium", "chromium-browser"}

// DefaultTimeout bounds a whole Browser (start, every page, every wait) unless New is given
// another.
const DefaultTimeout = 30 * time.Second

// Browser is one headless Chromium with one tab. Its methods fail the test on error (they
// call t.Fatal), so tests read as a script; Eval and Wait have error-returning forms for
// the steps a test expects to fail.
type Browser struct {
	t   testing.TB
	ctx context.Context // the tab's context; its deadline is the Browser's timeout
}

// Find returns the path of the chromium binary, or "" if none is installed.
func Find() string {
	for _, name := range Binaries {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Require returns the chromium binary's path. Without one it skips the test under -short
// and otherwise fails it, saying how to install it.
func Require(t testing.TB) string {
	t.Helper()
	p := Find()
	if p != "" {
		return p
	}
	msg := fmt.Sprintf("no Chromium binary (%s) on PATH: run `make deps` (Debian package chromium)", strings.Join(Binaries, ", "))
	if testing.Short() {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// New starts a headless Chromium for the test, stopped when the test ends. timeout bounds
// everything done with it (0 means DefaultTimeout). The browser runs without a sandbox
// (tests run as root in CI) and with a fresh temporary profile.
func New(t testing.TB, timeout time.Duration) *Browser {
	t.Helper()
	path := Require(t)
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		t.Logf("chromedp: "+format, args...)
	}))
	// The first Run starts the browser and ties its life to bctx, which must not carry the
	// deadline (chromedp's rule); the deadline goes on a context derived from it.
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start %s: %v", path, err)
	}
	ctx, cancelTimeout := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelBrowser() // closes the tab and the browser, and waits for the process
		cancelAlloc()
	})
	return &Browser{t: t, ctx: ctx}
}

// Context is the tab's chromedp context, for actions the helpers do not cover
// (chromedp.Run(b.Context(), ...)). Its deadline is the Browser's timeout.
func (b *Browser) Context() context.Context { return b.ctx }

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("navigate to %s: %v", url, err)
	}
}

// Text waits until the element matching the CSS selector exists and returns its text.
func (b *Browser) Text(selector string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS(selector)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", selector, err)
	}
	return s
}

// WaitText waits, up to d, until the text of the element matching the CSS selector
// satisfies ok, and returns it. It fails the test with the last text seen otherwise.
func (b *Browser) WaitText(selector string, d time.Duration, ok func(string) bool) string {
	b.t.Helper()
	s, err := b.TryWaitText(selector, d, ok)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// TryWaitText is WaitText returning an error instead of failing the test.
func (b *Browser) TryWaitText(selector string, d time.Duration, ok func(string) bool) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	last := ""
	for {
		s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(selector)))
		if err == nil {
			last = s
			if ok(s) {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("element %s: text %q after %v: %w", selector, last, d, errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SetFiles sets the files of the <input type=file> matching the CSS selector (paths on
// this machine), as a user choosing them would.
func (b *Browser) SetFiles(selector string, paths ...string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.SetUploadFiles(chromedp.CSS(selector), paths)); err != nil {
		b.t.Fatalf("set files of %s: %v", selector, err)
	}
}

// Click clicks the element matching the CSS selector.
func (b *Browser) Click(selector string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		b.t.Fatalf("click %s: %v", selector, err)
	}
}

// Location is the URL of the page now shown.
func (b *Browser) Location() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatalf("location: %v", err)
	}
	return s
}

// SetViewport sets the size of the page's window in CSS pixels (screenshots are of it).
func (b *Browser) SetViewport(width, height int64) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(width, height)); err != nil {
		b.t.Fatalf("viewport %dx%d: %v", width, height, err)
	}
}

// Screenshot returns a PNG of the visible page, for a test to save when it fails.
func (b *Browser) Screenshot() []byte {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// Eval runs a JavaScript expression in the page, awaits it if it is a promise, and
// returns its value as T (through JSON).
func Eval[T any](b *Browser, expr string) (T, error) {
	return chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}
