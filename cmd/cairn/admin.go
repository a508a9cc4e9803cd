package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/wire"
)

const adminUsage = `Usage: cairn admin [--admin ADDR] [--json] COMMAND [ARGS]
(the flags of cairn admin may also come after the command: cairn admin status --json)

Commands:
  status                 map epoch, managers and leader, nodes (state, zone, capacity, used, partitions),
                         buckets (objects, bytes), recovery in progress, warnings
  nodes                  the nodes of the cluster map
  placement BUCKET KEY   the nodes that hold an object, and each replica's version
  placement-version v1|v2 --yes
                         switch the cluster's placement algorithm (v2: bounded load, no node above
                         1.1 times its share; needs every node at feature level 13). It moves data:
                         every partition may get new holders, which copy it as after a join
  drain NODE             move every partition off a node (its copies go to the others, then it
                         removes its own once they confirmed them; see recovery)
  remove NODE            remove a drained node (or one marked out) from the cluster map; refused
                         while it still holds copies their new holders have not confirmed
  mark NODE up|down|out  set a node's state by hand
  recovery               what each node is copying in (recovery, rebalance), done, rate and ETA,
                         and what it still has to hand off
  recovery set --rate R  limit each node's copy rate (e.g. 50MiB per second; "unlimited")
  scrub start|pause|status [NODE]
                         deep scrub: read and verify every byte, repair damaged copies from replicas
  lifecycle [status]     S3 lifecycle rules: per bucket and storage node, the last finished round,
                         the next one due, and what the last round did (expired, noncurrent
                         versions removed, delete markers removed, uploads aborted, versions
                         Object Lock kept, errors)
  lifecycle run          start a round of every bucket's rules now on every storage node
  tier add NAME --endpoint URL --bucket B --access-key AK [--region R] [--recall transparent|restore]
                         add an external S3 archive tier (secret key from $CAIRN_TIER_SECRET_KEY or
                         --secret-key-file; sealed in the map, never printed); refused, nothing
                         changed, unless the endpoint answers for the bucket with the key
  tier add NAME --class CLASS [--recall transparent|restore]
                         add a device-class tier: a storage class restricted to a device class
  tier list | tier remove NAME [--force]
                         (remove refuses a tier whose bucket still holds objects, unless --force)
  tier marks DEVICE-CLASS --high H --low L --tier NAME [--pause] | --clear
                         a device class's water marks (percent of its nodes' --capacity)
  tier status            per device class with marks: capacity, used, bytes over the marks
  class create|set NAME (--replicas N [--w W] [--r R] [--d D] | --ec K+M [--w W])
                   [--device-class C] [--s3-names A,B] [--chunk-size S]
                         define or change a storage class: N copies, or an erasure code of K data
                         and M parity shards; only on nodes of a device class; selected by these
                         x-amz-storage-class names (STANDARD is the default class); objects of
                         classes other than STANDARD are cut in chunks of S (default: 4MiB
                         for copies, 1MiB shards for erasure codes with K >= 4)
  class list             the storage classes
  user add NAME [--no-key]
                         add an S3 user, with a first key (printed once; --no-key: none)
  user list | info NAME  users, their keys (never their secrets) and buckets
  user disable|enable NAME
                         refuse (or accept again) every key of a user, on every node within seconds
  user remove NAME       remove a user and its keys (refused while it owns buckets)
  user grant NAME BUCKET[/PREFIX] read|write|readwrite|owner|none
                         let a user read (get, list) or write (put, delete) the keys of another's
                         bucket that start with PREFIX, or own the whole bucket; none removes it
  key create USER        a new access key for a user: made and sealed here, its secret printed
                         once and never shown again
  key list [USER]        the access keys (of a user)
  key revoke [USER] ACCESS_KEY
                         revoke a key: refused by every node within seconds, presigned URLs too
  policy set BUCKET FILE the bucket's placement rules (docs/design/20261123_policy.md); "-" reads
                         stdin; an empty file clears them
  policy show BUCKET     the bucket's placement rules
  policy apply BUCKET [--no-wait]
                         re-place the bucket's existing objects by its rules, in the background on
                         every storage node; shows progress until done (Ctrl-C stops watching,
                         not the work)
  policy status BUCKET   progress of the last policy apply
  notify target add NAME --webhook URL | --redis HOST:PORT (--list KEY | --pubsub CH) [--secret-file F]
                         a bucket-notification target; configurations name it arn:cairn:sqs:::NAME
                         or arn:cairn:sns:::NAME; the secret is sealed here, never printed;
                         pub/sub is best effort (docs/design/notifications.md)
  notify target list     the targets (kind, destination, ARNs; never their secrets)
  notify target remove NAME
                         events still queued for it wait (as for a target down) until
                         it is added again or --notify-max-attempts makes them dead letters
  notify status          every storage node's outbox: pending, oldest, delivered, retries, dead letters
  internode-tls [status] internode mutual TLS: the cluster CA, whether plain connections are
                         refused, each node's certificate (expiry) and who holds the CA key
  internode-tls enable   turn internode TLS on in a cluster without it (upgraded from a build
                         before it, or bootstrapped with --internode-tls off): the leader makes
                         the CA, every node enrols, then plain connections are refused for
                         good; needs every node upgraded; run again if a node was slow

The admin address is --admin, else $CAIRN_ADMIN, else 127.0.0.1:9001: HOST:PORT, or a URL
(http://HOST:PORT, https://HOST:PORT). A node started with --tls-cert serves HTTPS: give
https://HOST:PORT, or --ca-file (else $CAIRN_CA_FILE), a PEM file of the CA certificates to
trust, which makes a bare HOST:PORT mean https. Requests are signed
with the cluster secret: $CAIRN_CLUSTER_SECRET, else --cluster-secret-file, else
DATA/cluster-secret with DATA from --data (default ./data).
`

// adminConn is how a command reaches the admin API: the flags cairn admin and cairn
// volume share.
type adminConn struct {
	addr, secretFile, dataDir, caFile *string
}

func adminFlags(fs *flag.FlagSet) *adminConn {
	return &adminConn{
		addr:       fs.String("admin", os.Getenv("CAIRN_ADMIN"), "admin address of any node"),
		secretFile: fs.String("cluster-secret-file", "", "file holding the cluster secret"),
		dataDir:    fs.String("data", "./data", "data directory to read the cluster secret from"),
		caFile:     fs.String("ca-file", os.Getenv("CAIRN_CA_FILE"), "PEM CA certificates to trust for an HTTPS admin address ($CAIRN_CA_FILE)"),
	}
}

// client returns a client of the admin API, and the secret store's box, from the flags.
func (a *adminConn) client() (*adminClient, *secrets.Box, error) {
	addr := *a.addr
	if addr == "" {
		addr = "127.0.0.1:9001"
	}
	secretS := os.Getenv("CAIRN_CLUSTER_SECRET")
	if secretS == "" {
		path := *a.secretFile
		if path == "" {
			path = filepath.Join(*a.dataDir, "cluster-secret")
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("admin: no cluster secret: set CAIRN_CLUSTER_SECRET or --cluster-secret-file (%v)", err)
		}
		secretS = strings.TrimSpace(string(data))
	}
	secret, err := rpc.NewSecret(secretS)
	if err != nil {
		return nil, nil, fmt.Errorf("admin: %w", err)
	}
	box, err := secrets.New(secretS)
	if err != nil {
		return nil, nil, fmt.Errorf("admin: %w", err)
	}
	c, err := newAdminClient(addr, *a.caFile, secret)
	if err != nil {
		return nil, nil, err
	}
	return c, box, nil
}

func runAdmin(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, adminUsage) }
	conn := adminFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(hoistFlags(fs, args)); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 || fs.Arg(0) == "help" {
		fmt.Fprint(stdout, adminUsage)
		return nil
	}
	c, box, err := conn.client()
	if err != nil {
		return err
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	need := func(n int, usage string) error {
		if len(rest) != n {
			return fmt.Errorf("admin: usage: cairn admin %s", usage)
		}
		return nil
	}
	switch cmd {
	case "status", "nodes":
		if err := need(0, cmd); err != nil {
			return err
		}
		var st server.Status
		if err := c.do(http.MethodGet, "status", &st); err != nil {
			return err
		}
		if cmd == "nodes" {
			if *asJSON {
				return printJSON(stdout, st.Nodes)
			}
			printNodes(stdout, &st)
			return nil
		}
		if *asJSON {
			return printJSON(stdout, &st)
		}
		printStatus(stdout, &st)
	case "placement":
		if err := need(2, "placement BUCKET KEY"); err != nil {
			return err
		}
		var pl struct {
			Bucket    string `json:"bucket"`
			Key       string `json:"key"`
			Partition int    `json:"partition"`
			Nodes     []string
			Replicas  []struct {
				Node    string `json:"node"`
				HLC     uint64 `json:"hlc"`
				ETag    string `json:"etag"`
				Size    int64  `json:"size"`
				Deleted bool   `json:"deleted"`
				Missing bool   `json:"missing"`
				Error   string `json:"error"`
				Class   string `json:"class,omitempty"`
				Layout  string `json:"layout,omitempty"`
				MetaHLC uint64 `json:"meta_hlc,omitempty"`
				Tags    int    `json:"tags,omitempty"`
			} `json:"replicas"`
		}
		q := "placement?bucket=" + urlQuery(rest[0]) + "&key=" + urlQuery(rest[1])
		if err := c.do(http.MethodGet, q, &pl); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, &pl)
		}
		fmt.Fprintf(stdout, "%s/%s: partition %d, nodes %s\n", pl.Bucket, pl.Key, pl.Partition, strings.Join(pl.Nodes, ", "))
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tVERSION\tSIZE\tETAG\tCLASS\tLAYOUT\tTAGS\tSTATE")
		for _, r := range pl.Replicas {
			state := "ok"
			switch {
			case r.Error != "":
				state = "error: " + r.Error
			case r.Missing:
				state = "missing"
			case r.Deleted:
				state = "deleted"
			}
			tags := "-" // how many, and the version's last in-place change of them
			if r.MetaHLC != 0 || r.Tags != 0 {
				tags = fmt.Sprintf("%d@%d", r.Tags, r.MetaHLC)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Node, r.HLC, r.Size, r.ETag, or(r.Class, "STANDARD"), or(r.Layout, "-"), tags, state)
		}
		tw.Flush()
	case "placement-version":
		return c.placementVersionCmd(stdout, rest)
	case "drain", "remove":
		if err := need(1, cmd+" NODE"); err != nil {
			return err
		}
		return c.nodeAction(stdout, rest[0], cmd, *asJSON)
	case "mark":
		if err := need(2, "mark NODE up|down|out"); err != nil {
			return err
		}
		switch rest[1] {
		case "up", "down", "out":
		default:
			return fmt.Errorf("admin: mark: unknown state %q (want up, down or out)", rest[1])
		}
		return c.nodeAction(stdout, rest[0], rest[1], *asJSON)
	case "class":
		return c.classCmd(stdout, rest, *asJSON)
	case "user":
		return c.userCmd(stdout, box, rest, *asJSON)
	case "key":
		return c.keyCmd(stdout, box, rest, *asJSON)
	case "policy":
		return c.policyCmd(stdout, rest, *asJSON)
	case "notify":
		return c.notifyCmd(stdout, box, rest, *asJSON)
	case "recovery":
		return c.recoveryCmd(stdout, rest, *asJSON)
	case "internode-tls":
		return c.internodeCmd(stdout, rest, *asJSON)
	case "lifecycle":
		return c.lifecycleCmd(stdout, rest, *asJSON)
	case "tier":
		return c.tierCmd(stdout, box, rest, *asJSON)
	case "scrub":
		if len(rest) < 1 || len(rest) > 2 {
			return fmt.Errorf("admin: usage: cairn admin scrub start|pause|status [NODE]")
		}
		q, method := "scrub", http.MethodGet
		switch rest[0] {
		case "start", "pause":
			q, method = "scrub?action="+rest[0], http.MethodPost
		case "status":
		default:
			return fmt.Errorf("admin: scrub: unknown action %q (want start, pause or status)", rest[0])
		}
		if len(rest) == 2 {
			if strings.Contains(q, "?") {
				q += "&node=" + urlQuery(rest[1])
			} else {
				q += "?node=" + urlQuery(rest[1])
			}
		}
		var sts []repair.ScrubStatus
		if err := c.do(method, q, &sts); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, sts)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tSTATE\tOBJECTS\tSHARDS\tBYTES\tCORRUPT\tREPAIRED\tUNREPAIRABLE\tERRORS\tRATE\tSTARTED\tFINISHED\tNEXT PASS")
		for _, s := range sts {
			rate := "unpaced"
			if s.RateBytes > 0 {
				rate = human(s.RateBytes) + "/s"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Node, s.State, s.Objects, s.Shards, human(s.Bytes), s.Corrupt, s.Repaired, s.Unrepairable, s.Errors,
				rate, when(s.Started), when(s.Finished), when(s.NextPass))
		}
		tw.Flush()
	default:
		return fmt.Errorf("admin: unknown command %q (cairn admin help)", cmd)
	}
	return nil
}

func (c *adminClient) lifecycleCmd(stdout io.Writer, args []string, asJSON bool) error {
	method := http.MethodGet
	switch {
	case len(args) == 0 || len(args) == 1 && args[0] == "status":
	case len(args) == 1 && args[0] == "run":
		method = http.MethodPost
	default:
		return fmt.Errorf("admin: usage: cairn admin lifecycle [status|run]")
	}
	var ls []server.NodeLifecycle
	if err := c.do(method, "lifecycle", &ls); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, ls)
	}
	if method == http.MethodPost {
		fmt.Fprintln(stdout, "lifecycle: a round of every bucket's rules started on every storage node that answered")
	}
	if len(ls) == 0 {
		fmt.Fprintln(stdout, "no bucket has lifecycle rules")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tNODE\tSTATE\tLAST FINISHED\tNEXT\tEVALUATED\tEXPIRED\tNONCURRENT\tMARKERS\tUPLOADS\tTRANSITIONED\tLOCKED\tERRORS")
	for _, l := range ls {
		state := "idle"
		switch {
		case l.Error != "":
			state = l.Error
		case l.Running:
			state = "running"
		case l.Err != "":
			state = "failed: " + l.Err
		}
		n := l.Last
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", l.Bucket, l.Node, state, when(l.Finished), when(l.Next),
			n.Scanned, n.ExpiredCurrent, n.ExpiredNoncurrent, n.RemovedMarkers, n.AbortedUploads, n.Transitioned+n.TransitionedNoncurrent, n.SkippedLocked, n.Errors)
	}
	tw.Flush()
	return nil
}

func urlQuery(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", "=", "%3D", "#", "%23", " ", "%20", "?", "%3F").Replace(s)
}

func (c *adminClient) nodeAction(stdout io.Writer, node, action string, asJSON bool) error {
	var st server.Status
	if err := c.do(http.MethodPost, "node/"+node+"/"+action, &st); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, &st)
	}
	fmt.Fprintf(stdout, "%s %s: done (map epoch %d)\n", action, node, st.Epoch)
	printNodes(stdout, &st)
	return nil
}

type adminClient struct {
	addr   string // as given, for messages
	base   string // scheme://host:port ("": http://addr)
	secret *rpc.Secret
	hc     *http.Client // nil: http.DefaultClient
}

// newAdminClient is a client of the admin API at addr: HOST:PORT (http, or https with a
// CA file) or a URL. caFile, if set, is the only trust for HTTPS.
func newAdminClient(addr, caFile string, secret *rpc.Secret) (*adminClient, error) {
	c := &adminClient{addr: addr, secret: secret, hc: http.DefaultClient}
	switch {
	case strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://"):
		c.base = strings.TrimSuffix(addr, "/")
	case caFile != "":
		c.base = "https://" + addr
	default:
		c.base = "http://" + addr
	}
	if caFile != "" {
		tc, err := clientTLS(caFile)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
	}
	return c, nil
}

func (c *adminClient) baseURL() string {
	if c.base == "" {
		return "http://" + c.addr
	}
	return c.base
}

// clientTLS is a TLS client configuration trusting only the CA certificates in caFile.
func clientTLS(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func (c *adminClient) do(method, path string, out any) error { return c.doBody(method, path, nil, out) }

func (c *adminClient) doBody(method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.send(ctx, method, "/admin/v1/"+path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// send signs and sends an admin request (path from the root, query included) and checks
// the answer's signature and status; the caller reads and closes the body.
func (c *adminClient) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	c.secret.Sign(req, "cairn-admin", 0, time.Now())
	hc := c.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin: cannot reach %s: %w", c.addr, err)
	}
	fail := func(err error) (*http.Response, error) { resp.Body.Close(); return nil, err }
	if resp.StatusCode == http.StatusBadRequest && req.URL.Scheme == "http" && resp.Header.Get(rpc.HdrRespSig) == "" {
		// net/http's answer to plain HTTP on a TLS port.
		if b, _ := io.ReadAll(io.LimitReader(resp.Body, 512)); strings.Contains(string(b), "HTTPS server") {
			return fail(fmt.Errorf("admin: %s serves HTTPS: give --ca-file (or $CAIRN_CA_FILE) with the CA that signed its certificate, or https://%s", c.addr, c.addr))
		}
	}
	if err := c.secret.VerifyResponse(resp, req.Header.Get(rpc.HdrNonce)); err != nil {
		return fail(fmt.Errorf("admin: %s: %w (a wrong cluster secret?)", c.addr, err))
	}
	if resp.StatusCode >= 400 {
		return fail(fmt.Errorf("admin: %w", wire.DecodeError(resp)))
	}
	return resp, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStatus(w io.Writer, st *server.Status) {
	fmt.Fprintf(w, "map epoch %d (digest %.12s), %d partitions, placement v%d, %d bucket(s)\n", st.Epoch, st.Digest, st.Partitions, max(st.Placement, 1), st.Buckets)
	if e, c := st.Effective, st.Class; e.N == c.N && e.W == c.W && e.R == c.R && e.D == c.D {
		fmt.Fprintf(w, "STANDARD: N=%d W=%d R=%d D=%d\n", st.Class.N, st.Class.W, st.Class.R, st.Class.D)
	} else {
		fmt.Fprintf(w, "STANDARD: N=%d W=%d R=%d D=%d in force (configured N=%d W=%d R=%d D=%d)\n", st.Effective.N, st.Effective.W, st.Effective.R, st.Effective.D,
			st.Class.N, st.Class.W, st.Class.R, st.Class.D)
	}
	var ms []string
	for _, m := range st.Managers {
		s := m.ID
		if m.Voter {
			s += " (voter)"
		}
		if m.ID == st.Leader {
			s += " *leader*"
		}
		ms = append(ms, s)
	}
	fmt.Fprintf(w, "managers: %s\n\n", strings.Join(ms, ", "))
	printNodes(w, st)
	if len(st.BucketUsage) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		versions := false // a column of noncurrent versions, when some bucket has them
		for _, b := range st.BucketUsage {
			versions = versions || b.Noncurrent > 0
		}
		if versions {
			fmt.Fprintln(tw, "BUCKET\tOBJECTS\tBYTES\tOLDER VERSIONS\tTHEIR BYTES")
		} else {
			fmt.Fprintln(tw, "BUCKET\tOBJECTS\tBYTES")
		}
		for _, b := range st.BucketUsage {
			if versions {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", b.Name, b.Objects, human(b.Bytes), b.Noncurrent, human(b.NoncurrentBytes))
			} else {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", b.Name, b.Objects, human(b.Bytes))
			}
		}
		tw.Flush()
		if st.UsagePartial {
			fmt.Fprintln(w, "(objects and bytes lack the copies of a storage node that did not answer)")
		}
	}
	if r := st.Recovery; r.ObjectsToDo > 0 {
		eta := "unknown"
		if r.ETASeconds >= 0 {
			eta = (time.Duration(r.ETASeconds) * time.Second).String()
		}
		fmt.Fprintf(w, "recovery: %d/%d objects, %s/%s, ETA %s\n", r.ObjectsDone, r.ObjectsToDo, human(r.BytesDone), human(r.BytesToDo), eta)
	}
	for _, note := range st.Notes {
		fmt.Fprintf(w, "note: %s\n", note)
	}
	for _, warn := range st.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

func printNodes(w io.Writer, st *server.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tADDR\tS3\tZONE\tSTATE\tCAPACITY\tUSED\tGARBAGE\tPARTITIONS\tHINTS")
	for _, n := range st.Nodes {
		used, garbage, hints := "-", "-", "-"
		if n.Stats != nil {
			used, garbage, hints = human(n.Stats.UsedBytes), human(n.Stats.GarbageBytes), fmt.Sprint(n.Stats.HintsPending)
		}
		state := string(n.State)
		if n.Error != "" && n.State == "up" {
			// This node's own view: the map says up, but the node did not answer just now
			// (the map changes only once the leader marks it down, and not at all
			// without a leader).
			state = "down (not answering; map: up)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.Addr, n.S3Addr, n.Zone, state, human(n.Capacity), used, garbage, n.Partitions, hints)
	}
	tw.Flush()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func human(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func (c *adminClient) classCmd(stdout io.Writer, args []string, asJSON bool) error {
	const usage = "admin: usage: cairn admin class create|set NAME (--replicas N [--w W] [--r R] [--d D] | --ec K+M [--w W]) [--device-class C] [--s3-names A,B] [--chunk-size S]; cairn admin class list"
	if len(args) == 1 && args[0] == "list" {
		var st server.Status
		if err := c.do(http.MethodGet, "status", &st); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, st.Classes)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLASS\tLAYOUT\tW\tR\tD\tDEVICE CLASS\tCHUNK\tS3 NAMES")
		for _, cls := range st.Classes {
			chunk := "-"
			if cls.Sharded() {
				chunk = fmt.Sprintf("%dKiB", cls.ChunkSize()>>10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", cls.Name, layout(cls), cls.W, cls.R, cls.D, or(cls.DeviceClass, "any"), chunk, or(strings.Join(cls.S3Names, ","), "-"))
		}
		return tw.Flush()
	}
	if len(args) < 2 || (args[0] != "set" && args[0] != "create") {
		return fmt.Errorf("%s", usage)
	}
	name := args[1]
	fs := flag.NewFlagSet("cairn admin class "+args[0], flag.ContinueOnError)
	n := fs.Int("replicas", 0, "copies (N) of a replicated class")
	ec := fs.String("ec", "", "erasure code K+M (e.g. 4+2): K data and M parity shards on K+M distinct nodes")
	w := fs.Int("w", 0, "write quorum: copies (default a majority of N) or shards (default K+1) durable before a write is acknowledged")
	r := fs.Int("r", 0, "read quorum (default 1; K for an erasure code)")
	d := fs.Int("d", 0, "delete quorum (default: a majority of N)")
	dev := fs.String("device-class", "", "place data only on nodes started with this --device-class (e.g. ssd)")
	s3names := fs.String("s3-names", "", "comma-separated x-amz-storage-class names that select this class (e.g. STANDARD_IA,GLACIER_IR)")
	chunk := fs.String("chunk-size", "", "bytes of an object per shard or copy (64KiB to 16MiB; default 4MiB for copies, 4MiB/K and at least 1MiB for an erasure code; not for STANDARD)")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	cls := clustermap.Class{Name: name, N: *n, W: *w, R: *r, D: *d, DeviceClass: *dev}
	if *chunk != "" {
		v, err := parseSize(*chunk)
		if err != nil {
			return fmt.Errorf("admin: class %s: --chunk-size: %w", name, err)
		}
		cls.Chunk = v
	}
	if *s3names != "" {
		for _, x := range strings.Split(*s3names, ",") {
			if x = strings.TrimSpace(x); x != "" {
				cls.S3Names = append(cls.S3Names, x)
			}
		}
	}
	switch {
	case *ec != "" && *n != 0:
		return fmt.Errorf("admin: class %s: give --replicas or --ec, not both", args[0])
	case *ec != "":
		k, m, err := parseEC(*ec)
		if err != nil {
			return fmt.Errorf("admin: class %s: %w", args[0], err)
		}
		cls.K, cls.M, cls.N = k, m, k+m
		if cls.W == 0 {
			cls.W = min(k+1, k+m)
		}
		if cls.R == 0 {
			cls.R = k
		}
		if cls.D == 0 {
			cls.D = cls.N/2 + 1
		}
	case *n < 1:
		return fmt.Errorf("admin: class %s: --replicas must be at least 1 (or give --ec K+M)", args[0])
	default:
		if cls.W == 0 {
			cls.W = *n/2 + 1
		}
		if cls.R == 0 {
			cls.R = 1
		}
		if cls.D == 0 {
			cls.D = *n/2 + 1
		}
	}
	body, _ := json.Marshal(clustermap.Command{Op: clustermap.OpPutClass, Class: &cls})
	var ans struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := c.doBody(http.MethodPost, "apply", body, &ans); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "class %s: %s W=%d R=%d D=%d device class %s (map epoch %d)\n", name, layout(cls), cls.W, cls.R, cls.D, or(cls.DeviceClass, "any"), ans.Epoch)
	return nil
}

// parseEC parses an erasure code "K+M".
func parseEC(s string) (k, m int, err error) {
	a, b, ok := strings.Cut(s, "+")
	k, err1 := strconv.Atoi(strings.TrimSpace(a))
	m, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad --ec %q: want K+M, e.g. 4+2 (4 data and 2 parity shards)", s)
	}
	return k, m, nil
}

// layout describes a class's redundancy.
func layout(c clustermap.Class) string {
	switch {
	case c.EC():
		return fmt.Sprintf("EC %d+%d", c.K, c.M)
	case c.Sharded():
		return fmt.Sprintf("%d copies (chunked)", c.N)
	}
	return fmt.Sprintf("%d copies", c.N)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c *adminClient) recoveryCmd(stdout io.Writer, args []string, asJSON bool) error {
	method, q := http.MethodGet, "recovery"
	if len(args) > 0 {
		if args[0] != "set" {
			return fmt.Errorf("admin: usage: cairn admin recovery [set --rate R]")
		}
		fs := flag.NewFlagSet("cairn admin recovery set", flag.ContinueOnError)
		rate := fs.String("rate", "", "bytes per second each node may copy in (e.g. 50MiB), or unlimited")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		var v int64
		switch *rate {
		case "":
			return fmt.Errorf("admin: recovery set: --rate is required (e.g. 50MiB, or unlimited)")
		case "unlimited":
		default:
			n, err := parseSize(*rate)
			if err != nil || n <= 0 {
				return fmt.Errorf("admin: recovery set: bad --rate %q: want a positive rate such as 50MiB (per second), or unlimited", *rate)
			}
			v = n
		}
		method, q = http.MethodPost, fmt.Sprintf("recovery?rate=%d", v)
	}
	var rec server.Recovery
	if err := c.do(method, q, &rec); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, &rec)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tOBJECTS DONE/TO MOVE\tBYTES DONE/TO MOVE\tTO HAND OFF\tRATE LIMIT")
	var handoff int64
	for _, n := range rec.Nodes {
		state := "idle"
		switch {
		case n.Error != "":
			state = n.Error
		case n.Running:
			state = "copying"
		case n.HandoffObjects > 0:
			state = "handing off"
		}
		handoff += n.HandoffObjects
		limit := "unlimited"
		if n.RateBytes > 0 {
			limit = human(n.RateBytes) + "/s"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s/%s\t%d (%s)\t%s\n", n.Node, state, n.ObjectsDone, n.ObjectsToDo, human(n.BytesDone), human(n.BytesToDo),
			n.HandoffObjects, human(n.HandoffBytes), limit)
	}
	tw.Flush()
	if handoff > 0 {
		fmt.Fprintf(stdout, "%d objects held outside their placement wait for their new holders to confirm before they are removed (hand-off)\n", handoff)
	}
	eta := "-"
	if rec.ETASeconds >= 0 {
		eta = (time.Duration(rec.ETASeconds) * time.Second).String()
	}
	fmt.Fprintf(stdout, "total: %d/%d objects, %s/%s, %s/s, ETA %s\n", rec.ObjectsDone, rec.ObjectsToDo, human(rec.BytesDone), human(rec.BytesToDo), human(int64(rec.RateBytes)), eta)
	return nil
}

func (c *adminClient) policyCmd(stdout io.Writer, args []string, asJSON bool) error {
	const usage = "admin: usage: cairn admin policy set BUCKET FILE | policy show BUCKET | policy apply BUCKET [--no-wait] | policy status BUCKET"
	if len(args) < 2 {
		return fmt.Errorf("%s", usage)
	}
	switch {
	case args[0] == "show" && len(args) == 2:
		var ans struct {
			Bucket string `json:"bucket"`
			Policy string `json:"policy"`
		}
		if err := c.do(http.MethodGet, "policy?bucket="+urlQuery(args[1]), &ans); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, &ans)
		}
		if ans.Policy == "" {
			fmt.Fprintf(stdout, "# bucket %s has no placement policy: objects go to the class they name, else STANDARD\n", ans.Bucket)
			return nil
		}
		fmt.Fprint(stdout, ans.Policy)
		if !strings.HasSuffix(ans.Policy, "\n") {
			fmt.Fprintln(stdout)
		}
		return nil
	case args[0] == "set" && len(args) == 3:
		var src []byte
		var err error
		if args[2] == "-" {
			src, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		} else {
			src, err = os.ReadFile(args[2])
		}
		if err != nil {
			return fmt.Errorf("admin: policy set: %w", err)
		}
		text := string(src)
		body, _ := json.Marshal(clustermap.Command{Op: clustermap.OpSetPolicy, Name: args[1], Policy: &text})
		var ans struct {
			Epoch uint64 `json:"epoch"`
		}
		if err := c.doBody(http.MethodPost, "apply", body, &ans); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "policy of bucket %s set (map epoch %d); it applies to new writes (cairn admin policy apply %s re-places existing objects)\n", args[1], ans.Epoch, args[1])
		return nil
	case args[0] == "status" && len(args) == 2:
		var rp server.Replace
		if err := c.do(http.MethodGet, "replace?bucket="+urlQuery(args[1]), &rp); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, &rp)
		}
		printReplace(stdout, &rp)
		return nil
	case args[0] == "apply":
		fs := flag.NewFlagSet("cairn admin policy apply", flag.ContinueOnError)
		noWait := fs.Bool("no-wait", false, "return once the request is in the cluster map")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		body, _ := json.Marshal(clustermap.Command{Op: clustermap.OpApplyPolicy, Name: args[1]})
		var ans struct {
			Epoch uint64 `json:"epoch"`
		}
		if err := c.doBody(http.MethodPost, "apply", body, &ans); err != nil {
			return err
		}
		var rp server.Replace
		if err := c.do(http.MethodGet, "replace?bucket="+urlQuery(args[1]), &rp); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "re-placing the objects of bucket %s by its policy (apply #%d, map epoch %d)\n", args[1], rp.Gen, ans.Epoch)
		if *noWait {
			return nil
		}
		gen, last := rp.Gen, ""
		for !rp.Done {
			time.Sleep(time.Second)
			if err := c.do(http.MethodGet, "replace?bucket="+urlQuery(args[1]), &rp); err != nil {
				return err
			}
			var scanned, moved, deferred int64
			for _, n := range rp.Nodes {
				if n.Gen == gen || n.Done >= gen {
					scanned, moved, deferred = scanned+n.Scanned, moved+n.Moved, deferred+n.Deferred
				}
			}
			if line := fmt.Sprintf("  %d objects visited, %d moved, %d waiting for a holder\n", scanned, moved, deferred); line != last {
				fmt.Fprint(stdout, line)
				last = line
			}
		}
		if asJSON {
			return printJSON(stdout, &rp)
		}
		printReplace(stdout, &rp)
		return nil
	}
	return fmt.Errorf("%s", usage)
}

// printReplace prints the per-node progress of a policy apply.
func printReplace(stdout io.Writer, rp *server.Replace) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tVISITED\tMOVED\tBYTES\tKEPT\tRACED\tWAITING\tLAST ERROR")
	for _, n := range rp.Nodes {
		state := "idle"
		switch {
		case n.Error != "":
			state = n.Error
		case n.Running:
			state = "running"
		case n.Done >= rp.Gen:
			state = "done"
		case n.Deferred > 0:
			state = "retrying"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n", n.Node, state, n.Scanned, n.Moved, human(n.Bytes), n.Kept, n.Raced, n.Deferred, or(n.ApplyProgress.Err, "-"))
	}
	tw.Flush()
	switch {
	case rp.Gen == 0:
		fmt.Fprintf(stdout, "bucket %s: no policy apply was asked for\n", rp.Bucket)
	case rp.Done:
		fmt.Fprintf(stdout, "bucket %s: apply #%d done on every storage node\n", rp.Bucket, rp.Gen)
	default:
		fmt.Fprintf(stdout, "bucket %s: apply #%d in progress\n", rp.Bucket, rp.Gen)
	}
}

// internodeCmd: cairn admin internode-tls [status|enable].
func (c *adminClient) internodeCmd(stdout io.Writer, args []string, asJSON bool) error {
	method := http.MethodGet
	switch {
	case len(args) == 0 || (len(args) == 1 && args[0] == "status"):
	case len(args) == 1 && args[0] == "enable":
		method = http.MethodPost
	default:
		return fmt.Errorf("admin: usage: cairn admin internode-tls [status|enable]")
	}
	var st wire.InternodeStatus
	if err := c.do(method, "internode-tls", &st); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, st)
	}
	switch {
	case st.CA == "":
		fmt.Fprintln(stdout, "internode TLS: off (plain, authenticated by the cluster secret); cairn admin internode-tls enable turns it on")
	case st.Required:
		fmt.Fprintf(stdout, "internode TLS: required (plain connections refused); CA %s\n", st.CA)
	default:
		fmt.Fprintf(stdout, "internode TLS: enabled, not yet required (nodes enrolling); CA %s\n", st.CA)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCERTIFICATE\tEXPIRES\tCA KEY\tERROR")
	for _, n := range st.Nodes {
		cert := "none"
		if n.CA != "" {
			cert = "ok"
		}
		key := ""
		if n.CAKey {
			key = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, cert, n.NotAfter, key, n.Err)
	}
	return tw.Flush()
}

// placementVersionCmd switches the cluster map's placement version (OpSetPlacement), only
// with --yes: a new version moves data.
func (c *adminClient) placementVersionCmd(stdout io.Writer, args []string) error {
	const usage = "admin: usage: cairn admin placement-version v1|v2 --yes"
	if len(args) < 1 || len(args) > 2 {
		return fmt.Errorf("%s", usage)
	}
	var v int
	switch args[0] {
	case "v1", "1":
		v = 1
	case "v2", "2":
		v = 2
	default:
		return fmt.Errorf("admin: placement-version %q: want v1 or v2", args[0])
	}
	if len(args) != 2 || args[1] != "--yes" {
		return fmt.Errorf("admin: placement-version %s changes the placement of every partition: data moves to new holders (as after a join, across the whole cluster) and the old ones keep their copies until the new ones confirm them; run it again with --yes to do it", args[0])
	}
	body, _ := json.Marshal(clustermap.Command{Op: clustermap.OpSetPlacement, Placement: v})
	var ans struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := c.doBody(http.MethodPost, "apply", body, &ans); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "placement version v%d (map epoch %d): every node recomputes its tables and the storage nodes copy their new partitions (cairn admin recovery)\n", v, ans.Epoch)
	return nil
}
