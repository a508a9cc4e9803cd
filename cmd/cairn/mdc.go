package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/server"
)

const mdcUsage = `Usage: cairn mdc COMMAND [FLAGS]

Multi-data-center replication: links to other cairn clusters (docs/design/mdc.md).

  link NAME --endpoint URL --secret-file F [--bucket B[,B...]] [--receive-only]
            [--endpoint-ca-file CA.pem]
        link this cluster to another: URL is its S3 endpoint (http://HOST:PORT or
        https://HOST:PORT, a node's --listen or a load balancer in front). Both clusters make a link of the same NAME
        and secret (a file, or - for standard input; at least 16 characters); the
        secret is checked with the remote before anything is stored (a wrong one is
        refused). --bucket: only these buckets (default: every bucket).
        --receive-only: this side sends nothing (the receiving end of a one-way link).
        --endpoint-ca-file: PEM CA certificates the https endpoint's certificate is
        verified against instead of the system's roots (a private CA); kept with the
        link. (--ca-file is the admin address's CA, as in cairn admin.)
  list                   the links
  status                 per link and storage node: changes waiting (backlog), their
                         bytes, the age of the oldest (lag), the last failure;
                         what was received; the investigations run from this node
  unlink NAME            remove a link (changes stacked for it are dropped)
  pause NAME | resume NAME
                         stop sending (changes keep being stacked) / start again
  investigate NAME       compare the two clusters partition by partition and repair
                         what differs, both ways; prints progress until done

Flags: --admin ADDR, --cluster-secret-file, --data, --ca-file, --json (as cairn admin).
`

func runMDC(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn mdc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mdcUsage) }
	conn := adminFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	endpoint := fs.String("endpoint", "", "the remote cluster's S3 endpoint URL (link)")
	secretFile := fs.String("secret-file", "", "file holding the link secret, - for standard input (link)")
	buckets := fs.String("bucket", "", "comma-separated buckets the link replicates (link; default every bucket)")
	receiveOnly := fs.Bool("receive-only", false, "this side of the link sends nothing (link)")
	endpointCA := fs.String("endpoint-ca-file", "", "PEM CA certificates to verify the remote's https endpoint against, instead of the system's roots (link)")
	if err := fs.Parse(hoistFlags(fs, args)); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 || fs.Arg(0) == "help" {
		fmt.Fprint(stdout, mdcUsage)
		return nil
	}
	c, box, err := conn.client()
	if err != nil {
		return err
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	name := ""
	switch cmd {
	case "list", "status":
		if len(rest) != 0 {
			return fmt.Errorf("mdc: usage: cairn mdc %s", cmd)
		}
	default:
		if len(rest) != 1 {
			return fmt.Errorf("mdc: usage: cairn mdc %s NAME", cmd)
		}
		name = rest[0]
	}
	switch cmd {
	case "list", "status":
		var v server.MDCView
		if err := c.do(http.MethodGet, "mdc", &v); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, &v)
		}
		return printMDC(stdout, &v, cmd == "status")
	case "link":
		return c.mdcLink(stdout, box, linkFlags{name: name, endpoint: *endpoint, secretFile: *secretFile, caFile: *endpointCA,
			buckets: *buckets, send: !*receiveOnly}, *asJSON)
	case "unlink":
		return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpRemoveLink, Name: name}, "removed link "+name, *asJSON)
	case "pause":
		return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpPauseLink, Name: name}, "paused link "+name+": changes are stacked and not sent", *asJSON)
	case "resume":
		return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpResumeLink, Name: name}, "resumed link "+name, *asJSON)
	case "investigate":
		return c.mdcInvestigate(stdout, name, *asJSON)
	}
	return fmt.Errorf("mdc: unknown command %q\n\n%s", cmd, mdcUsage)
}

// linkFlags are cairn mdc link's.
type linkFlags struct {
	name, endpoint, secretFile, caFile, buckets string
	send                                        bool
}

func (c *adminClient) mdcLink(stdout io.Writer, box *secrets.Box, f linkFlags, asJSON bool) error {
	name, endpoint, secretFile, buckets, send := f.name, f.endpoint, f.secretFile, f.buckets, f.send
	switch {
	case !clustermap.ValidTargetName(name):
		return fmt.Errorf("mdc: link name %q: 1-64 letters, digits, '-', '_' or '.'", name)
	case endpoint == "":
		return fmt.Errorf("mdc: link %s: --endpoint URL (the remote cluster's S3 endpoint) is required", name)
	case secretFile == "":
		return fmt.Errorf("mdc: link %s: --secret-file FILE (or - for standard input) is required: the secret is never taken from the command line", name)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("mdc: link %s: endpoint %q is not an http or https URL", name, endpoint)
	}
	caPEM := ""
	if f.caFile != "" {
		if u.Scheme != "https" {
			return fmt.Errorf("mdc: link %s: --endpoint-ca-file is for an https endpoint, not %s", name, endpoint)
		}
		b, err := os.ReadFile(f.caFile)
		if err != nil {
			return fmt.Errorf("mdc: link %s: --endpoint-ca-file: %w", name, err)
		}
		if _, err := clustermap.LinkCAPool(string(b)); err != nil {
			return fmt.Errorf("mdc: link %s: --endpoint-ca-file %s: %w", name, f.caFile, err)
		}
		caPEM = string(b)
	}
	sec, err := readSecretFile(secretFile)
	if err != nil {
		return fmt.Errorf("mdc: link %s: --secret-file: %w", name, err)
	}
	if len(sec) < 16 {
		return fmt.Errorf("mdc: link %s: the secret must be at least 16 characters", name)
	}
	var v server.MDCView
	if err := c.do(http.MethodGet, "mdc", &v); err != nil {
		return err
	}
	id := v.ClusterID
	if id == "" {
		var b [8]byte
		rand.Read(b[:])
		id = "c-" + hex.EncodeToString(b[:])
	}
	l := clustermap.Link{Name: name, Endpoint: endpoint, Send: send, CA: caPEM}
	for _, b := range strings.Split(buckets, ",") {
		if b = strings.TrimSpace(b); b != "" {
			l.Buckets = append(l.Buckets, b)
		}
	}
	note := ""
	h, err := server.LinkHello(context.Background(), endpoint, name, sec, id, caPEM)
	switch {
	case err == nil:
		l.Remote = h.ClusterID
	case errors.Is(errors.NotExist, err):
		note = "; the remote cluster has no link " + name + " yet: make it there with the same name and secret (changes are stacked here meanwhile)"
	case errors.Is(errors.Permission, err):
		return fmt.Errorf("mdc: link %s refused, nothing stored: %w (a wrong secret?)", name, err)
	default:
		return fmt.Errorf("mdc: link %s: cannot check the link with %s, nothing stored: %w", name, endpoint, err)
	}
	if l.Remote != "" && l.Remote == id {
		return fmt.Errorf("mdc: link %s: %s is this cluster itself", name, endpoint)
	}
	l.Secret = box.Seal(secrets.MDCLink, name, []byte(sec))
	dir := "both ways (if the remote sends too)"
	if !send {
		dir = "receive only"
	}
	return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpPutLink, Link: &l, ClusterID: id},
		fmt.Sprintf("link %s to %s (%s, remote cluster %s)%s", name, endpoint, dir, or(l.Remote, "unknown"), note), asJSON)
}

func (c *adminClient) mdcInvestigate(stdout io.Writer, name string, asJSON bool) error {
	var v server.MDCView
	if err := c.doBody(http.MethodPost, "mdc/investigate?link="+url.QueryEscape(name), nil, &v); err != nil {
		return err
	}
	last := ""
	for {
		var cur *server.Investigation
		for i := range v.Investigations {
			if v.Investigations[i].Link == name {
				cur = &v.Investigations[i]
			}
		}
		if cur == nil {
			return fmt.Errorf("mdc: investigation of %s: not reported by this node", name)
		}
		line := fmt.Sprintf("investigating %s: %d/%d differing partitions compared (of %d), %d records pushed, %d pulled, %d refused",
			name, cur.Compared, cur.Differing, cur.Partitions, cur.Pushed, cur.Pulled, cur.Refused)
		if !asJSON && line != last {
			fmt.Fprintln(stdout, line)
			last = line
		}
		if !cur.Running {
			if asJSON {
				b, _ := json.MarshalIndent(cur, "", "  ")
				fmt.Fprintln(stdout, string(b))
			}
			if cur.Err != "" {
				return fmt.Errorf("mdc: investigation of %s failed: %s", name, cur.Err)
			}
			if !asJSON {
				fmt.Fprintf(stdout, "investigation of %s done in %s\n", name, cur.Finished.Sub(cur.Started).Round(time.Millisecond))
			}
			return nil
		}
		time.Sleep(250 * time.Millisecond)
		if err := c.do(http.MethodGet, "mdc", &v); err != nil {
			return err
		}
	}
}

func printMDC(w io.Writer, v *server.MDCView, status bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !status {
		fmt.Fprintln(tw, "LINK\tENDPOINT\tBUCKETS\tDIRECTION\tSTATE\tREMOTE CLUSTER\tCA")
		for _, l := range v.Links {
			dir, state := "send+receive", "active"
			if !l.Send {
				dir = "receive"
			}
			if l.Paused {
				state = "paused"
			}
			ca := "system"
			if l.CA {
				ca = "link's own"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Endpoint, or(strings.Join(l.Buckets, ","), "*"), dir, state, or(l.Remote, "-"), ca)
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "cluster %s: received %d changes (%d already here), refused %d%s; %d not sent back to their origin\n",
		or(v.ClusterID, "-"), v.Applied, v.Held, v.Refused, func() string {
			if v.LastRefusal != "" {
				return " (last: " + v.LastRefusal + ")"
			}
			return ""
		}(), v.Echoes)
	fmt.Fprintln(tw, "LINK\tNODE\tBACKLOG\tBYTES\tLAG\tLAST ERROR")
	for _, l := range v.Links {
		state := ""
		if l.Paused {
			state = " (paused)"
		}
		fmt.Fprintf(tw, "%s%s\t*\t%d\t%d\t%.1fs\t-\n", l.Name, state, l.Entries, l.Bytes, l.Lag)
		for _, n := range l.Nodes {
			fmt.Fprintf(tw, "\t%s\t%d\t%d\t%.1fs\t%s\n", n.Node, n.Entries, n.Bytes, n.Lag, or(n.Error, "-"))
		}
	}
	for _, iv := range v.Investigations {
		state := "done"
		if iv.Running {
			state = "running"
		} else if iv.Err != "" {
			state = "failed: " + iv.Err
		}
		fmt.Fprintf(tw, "investigation %s: %s; %d/%d differing partitions compared, %d pushed, %d pulled, %d refused\n",
			iv.Link, state, iv.Compared, iv.Differing, iv.Pushed, iv.Pulled, iv.Refused)
	}
	return tw.Flush()
}
