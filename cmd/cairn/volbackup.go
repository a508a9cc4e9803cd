package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/volume"
)

// progress shows a transfer's progress on a terminal (one line redrawn), and only a
// summary line otherwise; nothing with quiet.
type progress struct {
	w            io.Writer
	what         string
	total, done  int64
	tty, quiet   bool
	start, shown time.Time
}

func newProgress(w io.Writer, what string, total int64, quiet bool) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, what: what, total: total, tty: tty, quiet: quiet, start: time.Now()}
}

func (p *progress) add(n int64) {
	p.done += n
	if p.quiet || !p.tty || time.Since(p.shown) < 100*time.Millisecond {
		return
	}
	p.shown = time.Now()
	pct := 100.0
	if p.total > 0 {
		pct = float64(p.done) * 100 / float64(p.total)
	}
	const width = 30
	bar := strings.Repeat("#", int(pct*width/100)) + strings.Repeat(".", width-int(pct*width/100))
	fmt.Fprintf(p.w, "\r%s [%s] %5.1f%% %s / %s %s/s ", p.what, bar, pct, humanSize(p.done), humanSize(p.total), humanSize(p.rate()))
}

func (p *progress) rate() int64 {
	s := time.Since(p.start).Seconds()
	if s <= 0 {
		return 0
	}
	return int64(float64(p.done) / s)
}

func (p *progress) finish(summary string) {
	if p.quiet {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: %s in %s (%s/s)\n", summary, humanSize(p.done), time.Since(p.start).Round(time.Millisecond), humanSize(p.rate()))
}

// object fetches data object index of a snapshot or a detached volume, checked against
// the signed SHA-256 header.
func (c *adminClient) object(name string, index int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := url.Values{"name": {name}, "index": {strconv.FormatInt(index, 10)}}
	resp, err := c.send(ctx, http.MethodGet, "/admin/v1/volume-object?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, volume.MaxBackupBlock+1))
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != resp.Header.Get(server.HdrDataSHA256) {
		return nil, fmt.Errorf("volume: data object %d of %s arrived damaged (its SHA-256 differs from the signed one)", index, name)
	}
	return b, nil
}

// exportWorkers is how many data objects an export fetches at once.
const exportWorkers = 4

// inOrder runs get(k) for every k in [0, n) on up to workers goroutines, at most
// 2*workers ahead of use, and calls use(k, v) in the order of k; it stops at the first
// error of either.
func inOrder[T any](n, workers int, get func(k int) (T, error), use func(k int, v T) error) error {
	type result struct {
		v   T
		err error
	}
	// A ring of 2*workers results, not one per k: an export of a thin 100 TiB volume
	// has 26 million data objects. k is handed out only once k-2*workers was used (the
	// window), so its slot is free by then.
	results := make([]chan result, 2*workers)
	for k := range results {
		results[k] = make(chan result, 1)
	}
	window := make(chan struct{}, 2*workers)
	stop := make(chan struct{})
	done := make(chan struct{})
	defer func() { close(stop); <-done }()
	go func() {
		defer close(done)
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range work {
					v, err := get(k)
					results[k%len(results)] <- result{v, err}
				}
			}()
		}
		defer wg.Wait()
		defer close(work)
		for k := range n {
			select {
			case window <- struct{}{}:
			case <-stop:
				return
			}
			select {
			case work <- k:
			case <-stop:
				return
			}
		}
	}()
	for k := range n {
		r := <-results[k%len(results)]
		<-window
		if r.err != nil {
			return r.err
		}
		if err := use(k, r.v); err != nil {
			return err
		}
	}
	return nil
}

// volumeExport writes NAME[@SNAP] as a raw image, or, with since, the incremental
// backup from snapshot since to it, to out (a file, or "-": stdout).
func volumeExport(c *adminClient, name, out, since string, quiet bool, stdout, stderr io.Writer) error {
	q := url.Values{"name": {name}}
	if since != "" {
		q.Set("since", since)
	}
	var lay server.VolumeLayout
	if err := c.do(http.MethodGet, "volume-layout?"+q.Encode(), &lay); err != nil {
		return err
	}
	var w io.Writer = stdout
	var f *os.File
	sparse := false // holes are skipped, not written: only in a regular file (truncated)
	if out != "-" {
		var err error
		if f, err = os.Create(out); err != nil {
			return fmt.Errorf("volume: export: %w", err)
		}
		defer f.Close()
		w = f
		// A block device keeps its old bytes where a hole is skipped, and a pipe
		// cannot seek: both get the zeroes written.
		fi, err := f.Stat()
		sparse = err == nil && fi.Mode().IsRegular()
	}
	bw := bufio.NewWriterSize(w, 4<<20)
	bs := lay.BlockSize
	if since == "" {
		p := newProgress(stderr, "exporting "+name, lay.Size, quiet)
		has := map[int64]bool{}
		for _, i := range lay.Indices {
			has[i] = true
		}
		zero := make([]byte, bs)
		err := inOrder(int((lay.Size+bs-1)/bs), exportWorkers, func(k int) ([]byte, error) {
			if !has[int64(k)] {
				return nil, nil
			}
			return c.object(name, int64(k))
		}, func(k int, b []byte) error {
			i := int64(k)
			n := min(bs, lay.Size-i*bs)
			switch {
			case b == nil && sparse: // a hole: the file stays sparse
				if err := bw.Flush(); err != nil {
					return err
				}
				if _, err := f.Seek(n, io.SeekCurrent); err != nil {
					return err
				}
			case b == nil:
				if _, err := bw.Write(zero[:n]); err != nil {
					return err
				}
			default:
				if _, err := bw.Write(b); err != nil {
					return err
				}
			}
			p.add(n)
			return nil
		})
		if err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if sparse {
			if err := f.Truncate(lay.Size); err != nil {
				return err
			}
		}
		if f != nil {
			if err := f.Close(); err != nil {
				return err
			}
		}
		p.finish("exported " + name)
		return nil
	}
	base := since
	if !strings.Contains(base, "@") {
		vol, _, _ := strings.Cut(name, "@")
		base = vol + "@" + since
	}
	var ss []server.SnapshotInfo
	if err := c.do(http.MethodGet, "snapshots", &ss); err != nil {
		return err
	}
	// The header names the base and the exported state by their layers: the import
	// checks the volume it applies the backup to is at the base.
	h := volume.BackupHeader{Size: lay.Size, BlockSize: bs, BaseSize: -1}
	for _, s := range ss {
		if s.Key == base {
			h.BaseSize, h.Base = s.Size, volume.BackupRef{Volume: s.Volume, Snapshot: s.Name, Layer: s.Layer}
		}
		if s.Key == name {
			h.Of = volume.BackupRef{Volume: s.Volume, Snapshot: s.Name, Layer: s.Layer}
		}
	}
	if h.BaseSize < 0 {
		return fmt.Errorf("volume: export: no snapshot %s (cairn volume snapshots)", base)
	}
	if h.Of.Layer == "" { // a detached volume: its head
		v, err := findVolume(c, name)
		if err != nil {
			return err
		}
		if v == nil {
			return fmt.Errorf("volume: export: no snapshot or volume %s", name)
		}
		h.Of = volume.BackupRef{Volume: v.Name, Layer: v.ID}
	}
	baseSize := h.BaseSize
	p := newProgress(stderr, "exporting "+name+" since "+base, int64(len(lay.Indices))*bs, quiet)
	bk, err := volume.NewBackupWriter(bw, h)
	if err != nil {
		return err
	}
	var changed int64
	err = inOrder(len(lay.Indices), exportWorkers, func(k int) ([2][]byte, error) {
		i := lay.Indices[k]
		cur, err := c.object(name, i)
		if err != nil || i*bs >= baseSize {
			return [2][]byte{cur}, err
		}
		old, err := c.object(base, i)
		return [2][]byte{cur, old}, err
	}, func(k int, b [2][]byte) error {
		i, cur := lay.Indices[k], b[0]
		digested := b[1] == nil // past the base's end: no digest
		if err := volume.DiffRuns(b[1], cur, 4096, func(off, n int) error {
			if !digested {
				digested = true
				if err := bk.BaseDigest(i, sha256.Sum256(b[1])); err != nil {
					return err
				}
			}
			changed += int64(n)
			return bk.Record(i, int64(off), cur[off:off+n])
		}); err != nil {
			return err
		}
		p.add(bs)
		return nil
	})
	if err != nil {
		return err
	}
	if err := bk.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return err
		}
	}
	p.finish(fmt.Sprintf("exported %s since %s (%s changed in %d data objects read)", name, base, humanSize(changed), len(lay.Indices)))
	return nil
}

// volumeImport writes a raw image or an incremental backup (told apart by its magic)
// from in (a file, or "-": stdin) into volume name: a raw image into a new volume
// (created with the image's size, or sizeArg) or an existing one; an incremental backup
// into the volume holding its base snapshot's content (grown to its size if needed).
// The volume is attached to the --admin node for the import (and detached after, if it
// was detached before).
func volumeImport(c *adminClient, name, in, sizeArg string, opt importOptions, stdin io.Reader, stdout, stderr io.Writer) error {
	quiet := opt.quiet
	var r io.Reader = stdin
	var fileSize int64 = -1
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return fmt.Errorf("volume: import: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			fileSize = fi.Size()
		}
		r = f
	}
	br := bufio.NewReaderSize(r, 4<<20)
	head, _ := br.Peek(len(volume.BackupMagic))
	incremental := volume.IsBackup(head)
	v, err := findVolume(c, name)
	if err != nil {
		return err
	}
	if !incremental && (opt.onto != "" || opt.forceBase) {
		return fmt.Errorf("volume: import: --onto and --force-base are for an incremental backup; %s is a raw image", in)
	}
	var h0 volume.BackupHeader
	if incremental && v != nil {
		// Before anything is written (or the volume attached): the volume must hold the
		// base the backup applies to.
		peek, _ := br.Peek(volume.MaxBackupHeader)
		if h0, err = volume.ReadBackupHeader(bytes.NewReader(peek)); err != nil {
			return fmt.Errorf("volume: import: %s: %w", in, err)
		}
		at, err := checkBase(c, v, h0, opt, stderr)
		if err != nil {
			return err
		}
		if opt.onto != "" && !opt.forceBase {
			// The operator's word that at is the base is checked where the backup
			// writes: the base's data objects there, by their digests.
			if fileSize < 0 {
				return fmt.Errorf("volume: import: --onto needs the backup in a FILE, not a stream: it is read once to check the base's digests before anything is written")
			}
			if err := checkDigests(c, in, h0, at); err != nil {
				return err
			}
		}
	}
	created := false
	if v != nil && !incremental && fileSize > v.Size {
		// Refused before a byte is written: the import stopped at the volume's end, its
		// first bytes overwritten.
		return fmt.Errorf("volume: import: the image (%s) is larger than volume %s (%s): nothing written; resize the volume first (cairn volume resize %s --size %d)", humanSize(fileSize), name, humanSize(v.Size), name, (fileSize+511)/512*512)
	}
	if v == nil {
		if incremental {
			return fmt.Errorf("volume: import: %s is an incremental backup: import it into a volume at its base (a clone of the base snapshot; or import the full image first, snapshot it and name that snapshot with --onto)", in)
		}
		size := fileSize
		if sizeArg != "" {
			n, err := parseSize(sizeArg)
			if err != nil {
				return fmt.Errorf("volume: --size: %w", err)
			}
			size = n
		}
		if size <= 0 {
			return fmt.Errorf("volume: import from a stream into a new volume needs --size")
		}
		size = (size + 511) / 512 * 512
		var nv server.VolumeInfo
		if err := c.doBody(http.MethodPost, "volume/create?"+url.Values{"name": {name}, "size": {strconv.FormatInt(size, 10)}}.Encode(), nil, &nv); err != nil {
			return err
		}
		v, created = &nv, true
	}
	detach := false
	if v.Holder == "" {
		var av server.VolumeInfo
		if err := c.doBody(http.MethodPost, "volume/attach?"+url.Values{"name": {name}}.Encode(), nil, &av); err != nil {
			return err
		}
		v, detach = &av, true
	}
	write := func(off int64, p []byte) error {
		var out map[string]int
		return c.doBody(http.MethodPost, "volume/write?"+url.Values{"name": {name}, "off": {strconv.FormatInt(off, 10)}}.Encode(), p, &out)
	}
	err = func() error {
		if incremental {
			// Again now that this node holds the lease: no other can have written since.
			if _, err := checkBase(c, v, h0, importOptions{onto: opt.onto, forceBase: opt.forceBase, quiet: true}, stderr); err != nil {
				return err
			}
			p := newProgress(stderr, "importing into "+name, fileSize, quiet)
			var h volume.BackupHeader
			var pend []byte // contiguous records, written together (at most a block)
			var pendOff, applied int64
			flush := func() error {
				if len(pend) == 0 {
					return nil
				}
				err := write(pendOff, pend)
				if err == nil {
					applied += int64(len(pend))
				}
				p.add(int64(len(pend)))
				pend = pend[:0]
				return err
			}
			var changed int64
			err := volume.ReadBackup(br, func(hh volume.BackupHeader) error {
				h = hh
				if h.Size > v.Size {
					var rv server.VolumeInfo
					if err := c.doBody(http.MethodPost, "volume/resize?"+url.Values{"name": {name}, "size": {strconv.FormatInt(h.Size, 10)}}.Encode(), nil, &rv); err != nil {
						return err
					}
					v.Size = rv.Size
				}
				return nil
			}, func(i, off int64, b []byte) error {
				abs := i*h.BlockSize + off // in the backup's block size: a write may span the volume's
				changed += int64(len(b))
				for len(b) > 0 {
					if len(pend) > 0 && (pendOff+int64(len(pend)) != abs || int64(len(pend)) == v.BlockSize) {
						if err := flush(); err != nil {
							return err
						}
					}
					if len(pend) == 0 {
						pendOff = abs
					}
					k := min(int64(len(b)), v.BlockSize-int64(len(pend)))
					pend = append(pend, b[:k]...)
					abs, b = abs+k, b[k:]
				}
				return nil
			})
			if err == nil {
				err = flush()
			}
			if err == nil {
				p.finish(fmt.Sprintf("applied an incremental backup to %s (%s changed)", name, humanSize(changed)))
			}
			if err != nil && applied > 0 {
				// Records are applied as they are read: a backup found damaged (or a write
				// that failed) halfway leaves the volume between the two states.
				err = fmt.Errorf("%w; %s of the backup were written into %s before: it now holds neither its base's content nor the backup's; import the whole backup again with --force-base (applying it twice is harmless; the base is not checked again: the volume is no longer at it)", err, humanSize(applied), name)
			}
			return err
		}
		p := newProgress(stderr, "importing into "+name, fileSize, quiet)
		buf := make([]byte, v.BlockSize)
		for off := int64(0); ; {
			n, err := io.ReadFull(br, buf)
			if n > 0 {
				if off+int64(n) > v.Size {
					return fmt.Errorf("volume: import: the image is larger than volume %s (%s)", name, humanSize(v.Size))
				}
				if !(created && volume.IsZero(buf[:n])) {
					if err := write(off, buf[:n]); err != nil {
						return err
					}
				}
				off += int64(n)
				p.add(int64(n))
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				p.finish("imported into " + name)
				return nil
			}
			if err != nil {
				return err
			}
		}
	}()
	if detach {
		var dv server.VolumeInfo
		if derr := c.doBody(http.MethodPost, "volume/detach?"+url.Values{"name": {name}}.Encode(), nil, &dv); err == nil {
			err = derr
		}
	}
	return err
}

// importOptions are cairn volume import's flags.
type importOptions struct {
	quiet bool
	// onto names a snapshot the operator vouches holds the backup's base (a restore
	// into another cluster: the base's layer is not there); forceBase skips every
	// check of the base.
	onto      string
	forceBase bool
}

// findVolume is volume name (nil if there is none).
func findVolume(c *adminClient, name string) (*server.VolumeInfo, error) {
	var vs []server.VolumeInfo
	if err := c.do(http.MethodGet, "volumes", &vs); err != nil {
		return nil, err
	}
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i], nil
		}
	}
	return nil, nil
}

// checkBase refuses unless volume v holds the base of the incremental backup h: it is
// at a snapshot (a clone of it, or rolled back to it, with nothing written since) whose
// layer is the one h names, or, with --onto, the one the operator names, of h's base
// size (checkDigests then checks its content where the backup writes). Layer ids are
// random 64-bit numbers, so a layer found is the base's, in this cluster. It returns the
// snapshot the volume is at (nil with --force-base).
func checkBase(c *adminClient, v *server.VolumeInfo, h volume.BackupHeader, opt importOptions, stderr io.Writer) (*server.SnapshotInfo, error) {
	name := v.Name
	if opt.forceBase {
		if !opt.quiet {
			fmt.Fprintf(stderr, "volume: import: --force-base: not checking that %s holds the backup's base\n", name)
		}
		return nil, nil
	}
	if h.Version < 2 {
		return nil, fmt.Errorf("volume: import: this incremental backup is of format version 1, which does not name its base: cairn cannot check that %s holds it, and applied onto anything else it leaves garbage; nothing written. Export it again with this build (it names its base), or give --force-base if you know %s holds the base's content", name, name)
	}
	what := fmt.Sprintf("the backup of %s (layer %s) applies to %s (layer %s)", h.Of, h.Of.Layer, h.Base, h.Base.Layer)
	var ss []server.SnapshotInfo
	if err := c.do(http.MethodGet, "snapshots", &ss); err != nil {
		return nil, err
	}
	var at *server.SnapshotInfo
	key := opt.onto
	if key != "" && !strings.Contains(key, "@") {
		key = name + "@" + key
	}
	for i := range ss {
		if (key == "" && ss[i].Layer == h.Base.Layer) || (key != "" && ss[i].Key == key) {
			at = &ss[i]
			break
		}
	}
	switch {
	case at == nil && key != "":
		return nil, fmt.Errorf("volume: import: --onto: no snapshot %s (cairn volume snapshots); nothing written", key)
	case at == nil:
		return nil, fmt.Errorf("volume: import: %s, and no snapshot of this cluster has that layer (the backup is from another cluster, or its base was deleted); nothing written. Restoring elsewhere: import the base's full image, snapshot the volume, and name that snapshot with --onto (cairn checks the volume is at it, and that its data objects the backup writes are the base's, by the base's digests in the backup)", what)
	case key != "" && at.Size != h.BaseSize:
		return nil, fmt.Errorf("volume: import: --onto %s: %s of %d bytes, and %s has %d: it is not a copy of the base; nothing written", key, what, h.BaseSize, key, at.Size)
	}
	var lay server.VolumeLayout
	if err := c.do(http.MethodGet, "volume-layout?"+url.Values{"name": {name}, "since": {at.Key}}.Encode(), &lay); err != nil {
		if strings.Contains(err.Error(), "not older") {
			return nil, fmt.Errorf("volume: import: %s, and volume %s is not at %s (neither a clone of it nor rolled back to it); nothing written. Clone %s into a new volume and import there (cairn volume clone %s NEW), or roll back", what, name, at.Key, at.Key, at.Key)
		}
		return nil, err
	}
	if len(lay.Indices) > 0 {
		return nil, fmt.Errorf("volume: import: %s, and volume %s has %d data objects written since it was at %s; nothing written. Roll it back (cairn volume rollback %s %s) or clone %s into a new volume", what, name, len(lay.Indices), at.Key, name, at.Key, at.Key)
	}
	return at, nil
}

// checkDigests refuses unless the data objects of snapshot at that the backup in file
// changes are the base's, by the base's digests the backup holds (version 2): the
// operator's --onto snapshot is then the base wherever the backup writes. The whole
// backup is read (and so found complete and well formed) before anything is written.
func checkDigests(c *adminClient, file string, h volume.BackupHeader, at *server.SnapshotInfo) error {
	if at.BlockSize != h.BlockSize {
		return fmt.Errorf("volume: import: --onto %s: its data objects are of %d bytes and the backup's of %d: the base's digests cannot be checked; nothing written (--force-base to apply it unchecked)", at.Key, at.BlockSize, h.BlockSize)
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("volume: import: %w", err)
	}
	defer f.Close()
	var idx []int64
	var sums [][32]byte
	err = volume.ReadBackupDigests(f, func(volume.BackupHeader) error { return nil }, func(i int64, sum [32]byte) error {
		idx, sums = append(idx, i), append(sums, sum)
		return nil
	}, func(int64, int64, []byte) error { return nil })
	if err != nil {
		return fmt.Errorf("volume: import: %s: %w; nothing written", file, err)
	}
	return inOrder(len(idx), exportWorkers, func(k int) ([]byte, error) {
		return c.object(at.Key, idx[k])
	}, func(k int, b []byte) error {
		if sha256.Sum256(b) != sums[k] {
			return fmt.Errorf("volume: import: --onto %s: its data object %d differs from the base's (%s) by the SHA-256 the backup holds: it is not a copy of the base; nothing written", at.Key, idx[k], h.Base)
		}
		return nil
	})
}
