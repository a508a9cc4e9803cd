package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/server"
)

const volumeUsage = `Usage: cairn volume [--admin ADDR] [--json] COMMAND [ARGS]
(the flags may also come after the command: cairn volume list --json)

Block volumes (docs/operations.md, "Block volumes"): disks for virtual machines and
databases, served over NBD by the one node that holds a volume's write lease.

Commands:
  create NAME --size SIZE [--class CLASS]
                         a new, empty volume (thin: it uses no space until written); SIZE in
                         bytes or with a unit (10GiB, 1TiB); CLASS: a replicated class
                         (default STANDARD)
  list                   the volumes: size, holder, lease epoch, NBD address
  info NAME              one volume
  resize NAME --size SIZE
                         grow a volume (volumes do not shrink); clients see the new size
                         when they connect again
  attach NAME [--node NODE] [--force]
                         give a node (default: the one --admin names) the volume's write lease
                         and print the volume's NBD URI; --force takes the lease from a holder
                         marked down, and returns once every storage node that is up has
                         learned the new lease (the old holder cannot write any more)
  detach NAME            give the write lease back
  delete NAME            delete a detached volume and its data (progress shown); refused
                         while it has snapshots
  snapshot NAME SNAP     freeze the volume's current state as snapshot NAME@SNAP (attached
                         or not: writes go on, copy on write); constant time and size
  snapshots [NAME]       the snapshots (of one volume); each is a read-only NBD export
                         NAME@SNAP on every node that serves NBD
  clone NAME@SNAP NEW    a new, detached volume NEW that starts as the snapshot
  rollback NAME SNAP     return a detached volume to its snapshot SNAP (what was written
                         since is discarded; later snapshots stay)
  export NAME[@SNAP] [FILE|-] [--since SNAP0] [--quiet]
                         a snapshot (or a detached volume) as a raw image (sparse in a
                         FILE), or with --since only what changed since the older snapshot
                         SNAP0 of the same volume, in cairn's incremental backup format
                         (docs/design/volume-snapshots.md); progress on a terminal
  import NAME [FILE|-] [--size SIZE] [--onto SNAP | --force-base] [--quiet]
                         a raw image into volume NAME (created with the image's size, or
                         SIZE from a stream, if it does not exist), or an incremental backup
                         into a volume at its base: a clone of the base snapshot or a volume
                         rolled back to it, nothing written since (checked by the layer id
                         the backup names); --onto SNAP, the snapshot NAME is at, which the
                         operator vouches holds the base (a restore into another cluster;
                         a FILE: the base's digests in it are checked against SNAP's data
                         objects it writes); --force-base checks nothing (version 1
                         backups need it); the volume
                         is attached to the --admin node for it, detached after if it was
                         detached
  space                  the data objects stored, and the layers waiting to be reclaimed
  delete NAME@SNAP       delete a snapshot; its data objects no one else reads are freed in
                         the background; refused while clones (or the branch a rollback
                         left) depend on it
  client-cert NAME --out DIR [--volumes LIST] [--valid DURATION]
                         an NBD client certificate of the cluster CA for NAME (a hypervisor,
                         a tool) that opens the volumes in LIST (comma-separated: names, a
                         prefix ending in *, or *; default NAME) on listeners started with
                         --nbd-tls require; writes DIR/ca-cert.pem, client-cert.pem and
                         client-key.pem (the key made here, 0600, never sent), the layout of
                         qemu's tls-creds-x509 dir= and libnbd's tls-certificates=; valid
                         DURATION (default 8760h); --admin must be a manager (it holds the
                         CA key); the certificate is recorded in the cluster map (feature
                         level 10) before it is handed out
  client-cert list       the NBD client certificates issued (not yet expired): serial, name,
                         volumes, issued, expiry, and whether revoked
  client-cert revoke SERIAL | --name NAME
                         revoke the certificate of SERIAL (hex, as list and client-cert
                         print it), or every one issued to NAME: every NBD listener refuses
                         it at the TLS handshake from the moment the command returns
                         (connections opened before stay open)

The admin address, the cluster secret and --ca-file are found as for cairn admin.
`

func runVolume(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn volume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, volumeUsage) }
	conn := adminFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	size := fs.String("size", "", "volume size (create, resize)")
	class := fs.String("class", "", "storage class of the data objects (create)")
	node := fs.String("node", "", "node to attach to (attach; default: the node --admin names)")
	force := fs.Bool("force", false, "take the lease from a holder marked down (attach)")
	since := fs.String("since", "", "export only what changed since this snapshot (export)")
	quiet := fs.Bool("quiet", false, "no progress and no summary (export, import)")
	onto := fs.String("onto", "", "the snapshot the volume is at, vouched to hold the incremental backup's base (import)")
	forceBase := fs.Bool("force-base", false, "apply an incremental backup without checking the volume holds its base (import)")
	certOut := fs.String("out", "", "directory for the client certificate's files (client-cert)")
	certVolumes := fs.String("volumes", "", "volumes the client certificate opens: names, PREFIX*, or * (client-cert; default: NAME)")
	certValid := fs.String("valid", "", "validity of the client certificate, e.g. 720h (client-cert; default 8760h)")
	certName := fs.String("name", "", "revoke every client certificate issued to this name (client-cert revoke)")
	if err := fs.Parse(hoistFlags(fs, args)); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() == 0 || fs.Arg(0) == "help" {
		fmt.Fprint(stdout, volumeUsage)
		return nil
	}
	c, _, err := conn.client()
	if err != nil {
		return err
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	name := ""
	switch cmd {
	case "list":
	case "space":
		var sp server.VolumeSpace
		if err := c.do(http.MethodGet, "volume-space", &sp); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, sp)
		}
		fmt.Fprintf(stdout, "%d data objects in %d layers; %d layers waiting to be reclaimed\n", sp.Objects, len(sp.Layers), sp.Garbage)
		return nil
	case "snapshot", "clone", "rollback":
		if len(rest) != 2 {
			args := map[string]string{"snapshot": "NAME SNAP", "clone": "NAME@SNAP NEW", "rollback": "NAME SNAP"}[cmd]
			return fmt.Errorf("volume: usage: cairn volume %s %s (cairn volume help)", cmd, args)
		}
		return runSnapshotCommand(c, cmd, rest[0], rest[1], *asJSON, stdout)
	case "export", "import":
		if len(rest) < 1 || len(rest) > 2 {
			return fmt.Errorf("volume: usage: cairn volume %s NAME[@SNAP] [FILE|-] (cairn volume help)", cmd)
		}
		file := "-"
		if len(rest) == 2 {
			file = rest[1]
		}
		if cmd == "export" {
			if *onto != "" || *forceBase {
				return fmt.Errorf("volume: --onto and --force-base are for import")
			}
			if file == "-" && *since == "" {
				if f, ok := stdout.(*os.File); ok {
					if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
						return fmt.Errorf("volume: export: stdout is a terminal: give a FILE, or redirect it")
					}
				}
			}
			return volumeExport(c, rest[0], file, *since, *quiet, stdout, stderr)
		}
		return volumeImport(c, rest[0], file, *size, importOptions{quiet: *quiet, onto: *onto, forceBase: *forceBase}, os.Stdin, stdout, stderr)
	case "client-cert":
		switch {
		case len(rest) == 1 && rest[0] == "list":
			return volumeClientCertList(c, *asJSON, stdout)
		case len(rest) >= 1 && rest[0] == "revoke":
			serial := ""
			if len(rest) == 2 {
				serial = rest[1]
			}
			if len(rest) > 2 || (serial == "") == (*certName == "") {
				return fmt.Errorf("volume: usage: cairn volume client-cert revoke SERIAL | --name NAME (cairn volume help)")
			}
			return volumeClientCertRevoke(c, serial, *certName, *asJSON, stdout)
		case len(rest) != 1:
			return fmt.Errorf("volume: usage: cairn volume client-cert NAME --out DIR [--volumes LIST] [--valid DURATION] | list | revoke SERIAL|--name NAME (cairn volume help)")
		}
		return volumeClientCert(c, rest[0], *certOut, *certVolumes, *certValid, *asJSON, stdout)
	case "snapshots":
		if len(rest) > 1 {
			return fmt.Errorf("volume: usage: cairn volume snapshots [NAME] (cairn volume help)")
		}
		if len(rest) == 1 {
			name = rest[0]
		}
		var ss []server.SnapshotInfo
		if err := c.do(http.MethodGet, "snapshots?"+url.Values{"volume": {name}}.Encode(), &ss); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, ss)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SNAPSHOT\tSIZE\tCREATED\tLAYER")
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Key, humanSize(s.Size), time.Unix(0, s.Created).UTC().Format(time.RFC3339), s.Layer)
		}
		return tw.Flush()
	default:
		if len(rest) != 1 {
			return fmt.Errorf("volume: usage: cairn volume %s NAME (cairn volume help)", cmd)
		}
		name = rest[0]
	}
	q := url.Values{"name": {name}}
	print := func(v server.VolumeInfo) error {
		if *asJSON {
			return printJSON(stdout, v)
		}
		printVolumes(stdout, []server.VolumeInfo{v})
		return nil
	}
	switch cmd {
	case "create", "resize":
		n, err := parseSize(*size)
		if err != nil || n <= 0 {
			return fmt.Errorf("volume: --size SIZE is required: bytes, or with a unit (10GiB)")
		}
		q.Set("size", strconv.FormatInt(n, 10))
		if cmd == "create" && *class != "" {
			q.Set("class", *class)
		}
		var v server.VolumeInfo
		if err := c.doBody(http.MethodPost, "volume/"+cmd+"?"+q.Encode(), nil, &v); err != nil {
			return err
		}
		return print(v)
	case "attach", "detach":
		if *node != "" {
			q.Set("node", *node)
		}
		if *force {
			q.Set("force", "1")
		}
		var v server.VolumeInfo
		if err := c.doBody(http.MethodPost, "volume/"+cmd+"?"+q.Encode(), nil, &v); err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, v)
		}
		if cmd == "attach" {
			if v.URI == "" {
				fmt.Fprintf(stdout, "volume %s attached on %s (lease epoch %d); that node serves no NBD: start it with --nbd-listen\n", v.Name, v.Holder, v.Epoch)
				return nil
			}
			fmt.Fprintf(stdout, "volume %s attached on %s (lease epoch %d)\n%s\n", v.Name, v.Holder, v.Epoch, v.URI)
			return nil
		}
		fmt.Fprintf(stdout, "volume %s detached\n", v.Name)
	case "list", "info":
		var vs []server.VolumeInfo
		if err := c.do(http.MethodGet, "volumes", &vs); err != nil {
			return err
		}
		if cmd == "info" {
			for _, v := range vs {
				if v.Name == name {
					return print(v)
				}
			}
			return fmt.Errorf("volume: no volume %q (cairn volume list)", name)
		}
		if *asJSON {
			return printJSON(stdout, vs)
		}
		printVolumes(stdout, vs)
	case "delete":
		if strings.Contains(name, "@") {
			var d server.VolumeDelete
			if err := c.doBody(http.MethodPost, "volume/delete?"+q.Encode(), nil, &d); err != nil {
				return err
			}
			if *asJSON {
				return printJSON(stdout, map[string]any{"name": name, "deleted": true})
			}
			fmt.Fprintf(stdout, "snapshot %s deleted (its data objects no one else reads are freed in the background)\n", name)
			return nil
		}
		var total int64
		start := time.Now()
		for {
			var d server.VolumeDelete
			if err := c.doBody(http.MethodPost, "volume/delete?"+q.Encode(), nil, &d); err != nil {
				return err
			}
			total += d.Deleted
			if d.Done {
				if !*asJSON {
					fmt.Fprintf(stdout, "\rvolume %s deleted: %d data objects in %s\n", name, total, time.Since(start).Round(time.Millisecond))
					return nil
				}
				return printJSON(stdout, map[string]any{"name": name, "deleted_objects": total})
			}
			if !*asJSON {
				fmt.Fprintf(stdout, "\rdeleting volume %s: %d data objects deleted", name, total)
			}
		}
	default:
		return fmt.Errorf("volume: unknown command %q (cairn volume help)", cmd)
	}
	return nil
}

func printVolumes(w io.Writer, vs []server.VolumeInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tCLASS\tHOLDER\tEPOCH\tNBD")
	for _, v := range vs {
		class, holder := v.Class, v.Holder
		if class == "" {
			class = "STANDARD"
		}
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", v.Name, humanSize(v.Size), class, holder, v.Epoch, v.URI)
	}
	tw.Flush()
}

// humanSize prints n bytes with a binary unit.
func humanSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// runSnapshotCommand runs cairn volume snapshot|clone|rollback.
func runSnapshotCommand(c *adminClient, cmd, a, b string, asJSON bool, stdout io.Writer) error {
	q := url.Values{}
	switch cmd {
	case "snapshot":
		q.Set("name", a)
		q.Set("snapshot", b)
		var s server.SnapshotInfo
		if err := c.doBody(http.MethodPost, "volume/snapshot?"+q.Encode(), nil, &s); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, s)
		}
		fmt.Fprintf(stdout, "snapshot %s taken in %.1f ms (%d bytes written to the cluster map); read-only NBD export %s\n", s.Key, s.Millis, s.CommandBytes, s.Key)
		return nil
	case "clone":
		if !strings.Contains(a, "@") {
			return fmt.Errorf("volume: clone takes a snapshot, NAME@SNAP (cairn volume snapshots)")
		}
		q.Set("source", a)
		q.Set("name", b)
	case "rollback":
		// SNAP may be given as the snapshot's full name, NAME@SNAP, as clone takes it.
		if vol, snap, ok := strings.Cut(b, "@"); ok {
			if vol != a {
				return fmt.Errorf("volume: %s is a snapshot of %s, not of %s: a volume rolls back only to its own snapshots", b, vol, a)
			}
			b = snap
		}
		q.Set("name", a)
		q.Set("snapshot", b)
	}
	var v server.VolumeInfo
	if err := c.doBody(http.MethodPost, "volume/"+cmd+"?"+q.Encode(), nil, &v); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, v)
	}
	if cmd == "clone" {
		fmt.Fprintf(stdout, "volume %s cloned from %s (detached: cairn volume attach %s)\n", v.Name, a, v.Name)
	} else {
		fmt.Fprintf(stdout, "volume %s rolled back to %s@%s\n", v.Name, a, b)
	}
	return nil
}
