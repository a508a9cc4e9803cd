// Command s3bench measures cairn's S3 API: objects/s, MiB/s and latency percentiles of
// small and large PUTs and GETs, next to a bare net/http server measured in the same run
// with the same client code, which is the ceiling of the machine.
//
// By default it builds nothing: it starts the cairn binary given by --cairn on free
// loopback ports with a fresh data directory, and stops it at the end. With --endpoint it
// benches a running S3 server instead. Run "go run ./tools/s3bench -h" for the flags and
// see README.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3bench:", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

// run is the whole program; progress goes to stderr, the report to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	results, runErr := b.runPhases(ctx)
	target := b.targetName()
	var srvTLS *serverReport
	if b.tls != nil {
		target += "; HTTPS: " + b.tls.targetName()
		srvTLS = b.tls.close()
	}
	srv := b.close()
	rep := newReport(cfg, target, results, srv)
	rep.ServerTLS = srvTLS
	printReport(stdout, rep)
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, rep); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	for _, p := range results {
		if p.Errors > 0 {
			return fmt.Errorf("%s had %d errors, first: %s", p.Name, p.Errors, p.FirstError)
		}
	}
	return nil
}

// bench holds what the phases share.
type bench struct {
	cfg      *config
	progress io.Writer
	tr       *http.Transport
	tls      *bench // --tls: the HTTPS node, each cairn phase run against it right after
	bare     *bareServer
	proc     *cairnProc // nil with --endpoint
	bareT    *target
	cairnT   *target
	bareData *dataset
	small    *dataset
	large    *dataset
}

func newBench(ctx context.Context, cfg *config, progress io.Writer) (_ *bench, err error) {
	b := &bench{cfg: cfg, progress: progress, tr: newTransport(max(cfg.smallClients, cfg.largeClients))}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	client := &http.Client{Transport: b.tr, Timeout: cfg.timeout}
	if cfg.has("bare-get") || cfg.has("bare-put") {
		if err := b.startBare(client); err != nil {
			return nil, err
		}
	}
	if b.needsCairn() {
		if err := b.startTarget(ctx, client, nil); err != nil {
			return nil, err
		}
		if cfg.tls {
			if b.tls, err = newTLSBench(ctx, cfg, progress); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// newTLSBench starts a second cairn serving HTTPS with a certificate from a throwaway CA,
// with its own transport that trusts that CA, bucket and objects.
func newTLSBench(ctx context.Context, cfg *config, progress io.Writer) (*bench, error) {
	ca, err := testcert.NewCA("s3bench CA")
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, progress: progress, tr: newTransport(max(cfg.smallClients, cfg.largeClients))}
	b.tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if err := b.startTarget(ctx, &http.Client{Transport: b.tr, Timeout: cfg.timeout}, ca); err != nil {
		b.close()
		return nil, fmt.Errorf("HTTPS node: %w", err)
	}
	return b, nil
}

func (b *bench) needsCairn() bool {
	for _, p := range b.cfg.phases {
		if !strings.HasPrefix(p, "bare-") {
			return true
		}
	}
	return false
}

func (b *bench) startBare(client *http.Client) error {
	b.bareData = newDataset("bare/", b.cfg.smallSize, b.cfg.smallClients)
	srv, err := startBare(b.bareData.content[:b.cfg.smallSize])
	if err != nil {
		return fmt.Errorf("bare server: %w", err)
	}
	b.bare = srv
	b.bareT = &target{name: "bare", base: srv.url, bucket: "bare", accessKey: "bare", secretKey: "bare",
		region: b.cfg.region, client: client}
	return nil
}

// startTarget starts cairn (or takes --endpoint) and creates the bucket. With ca, the
// started cairn serves HTTPS with a certificate ca issues.
func (b *bench) startTarget(ctx context.Context, client *http.Client, ca *testcert.CA) error {
	t := &target{name: "cairn", base: b.cfg.endpoint, bucket: "s3bench-" + randHex(4),
		accessKey: b.cfg.accessKey, secretKey: b.cfg.secretKey, region: b.cfg.region, client: client}
	if ca != nil {
		t.name = "cairn-tls"
	}
	if b.cfg.endpoint == "" {
		p, err := startCairn(ctx, b.cfg.cairnBin, b.cfg.dir, b.cfg.startTimeout, ca)
		if err != nil {
			return err
		}
		fmt.Fprintf(b.progress, "s3bench: started %s at %s (data in %s)\n", b.cfg.cairnBin, p.endpoint, p.tmp)
		b.proc = p
		t.base, t.accessKey, t.secretKey = p.endpoint, p.accessKey, p.secretKey
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := t.createBucket(cctx); err != nil {
		return fmt.Errorf("cannot create bucket at %s: %w", t.base, err)
	}
	b.cairnT = t
	b.small = newDataset("small/", b.cfg.smallSize, b.cfg.smallClients)
	if b.cfg.has("put-16m") || b.cfg.has("get-16m") {
		b.large = newDataset("large/", b.cfg.largeSize, b.cfg.largeClients)
		b.large.hot = b.cfg.hotLarge
	}
	return nil
}

func (b *bench) targetName() string {
	switch {
	case b.proc != nil:
		return fmt.Sprintf("cairn %s (%s, started by s3bench at %s)", b.proc.version, b.cfg.cairnBin, b.proc.endpoint)
	case b.cairnT != nil:
		return b.cfg.endpoint
	}
	return "bare server only"
}

// close stops the servers (it may be called more than once) and returns what the started
// cairn did, if any.
func (b *bench) close() *serverReport {
	if b.bare != nil {
		b.bare.close()
	}
	if b.tls != nil {
		b.tls.close()
	}
	b.tr.CloseIdleConnections()
	if b.proc == nil {
		return nil
	}
	r := b.proc.stop()
	return &r
}

// newPhase describes the named phase.
func (b *bench) newPhase(name string) *phase {
	c := b.cfg
	p := &phase{name: name, tgt: b.cairnT, clients: c.smallClients, data: b.small, verify: c.verify}
	if b.proc != nil {
		p.serverPID = b.proc.p.PID()
	}
	switch name {
	case "bare-get", "bare-put":
		p.tgt, p.data, p.anyKey = b.bareT, b.bareData, name == "bare-get"
	case "put-16m", "get-16m":
		p.clients, p.data = c.largeClients, b.large
	}
	p.put = strings.Contains(name, "put")
	return p
}

// runPhases runs the phases; with --tls each cairn phase is followed at once by the same
// phase against the HTTPS node (PHASE-tls), so that both see about the same machine.
func (b *bench) runPhases(ctx context.Context) ([]phaseResult, error) {
	var results []phaseResult
	for _, name := range b.cfg.phases {
		r, err := b.runPhase(ctx, name, "")
		if r.Name != "" {
			results = append(results, r)
		}
		if err == nil && b.tls != nil && !strings.HasPrefix(name, "bare-") {
			if r, err = b.tls.runPhase(ctx, name, "-tls"); r.Name != "" {
				results = append(results, r)
			}
		}
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// runPhase runs one phase (seeding a GET phase first if needed), reported as name+suffix.
func (b *bench) runPhase(ctx context.Context, name, suffix string) (phaseResult, error) {
	if err := ctx.Err(); err != nil {
		return phaseResult{}, fmt.Errorf("interrupted")
	}
	p := b.newPhase(name)
	p.name += suffix
	if err := b.seedIfEmpty(ctx, p); err != nil {
		return phaseResult{}, err
	}
	fmt.Fprintf(b.progress, "s3bench: %-8s %2d clients x %s for %v\n", p.name, p.clients, formatSize(p.data.size), b.cfg.duration)
	r := p.run(ctx, b.cfg.duration)
	if b.proc != nil && !b.proc.p.Running() {
		return r, fmt.Errorf("cairn exited during %s (%v): %s", p.name, b.proc.p.ExitErr(), b.proc.p.LogTail(1))
	}
	return r, nil
}

// seedIfEmpty writes objects for a GET phase whose PUT phase did not run.
func (b *bench) seedIfEmpty(ctx context.Context, p *phase) error {
	if p.put || p.anyKey || p.data.count() > 0 {
		return nil
	}
	per := 32
	if p.data == b.large {
		per = 2
	}
	fmt.Fprintf(b.progress, "s3bench: writing %d objects for %s\n", per*p.clients, p.name)
	s := &phase{name: p.name, tgt: p.tgt, clients: p.clients, data: p.data, put: true}
	return s.seed(ctx, per)
}
