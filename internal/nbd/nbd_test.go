package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// fileDevice serves an export from a file (the tests' device: the protocol layer is
// what is under test here).
type fileDevice struct{ f *os.File }

func (d fileDevice) ReadAt(p []byte, off int64) (int, error)  { return d.f.ReadAt(p, off) }
func (d fileDevice) WriteAt(p []byte, off int64) (int, error) { return d.f.WriteAt(p, off) }
func (d fileDevice) Flush() error                             { return d.f.Sync() }
func (d fileDevice) Trim(off, n int64) error                  { return writeZeroes(zeroOnly{d}, off, n) }

// zeroOnly hides a device's Zeroer, if any.
type zeroOnly struct{ Device }

// fileCatalog serves the files of a directory, each as an export of its name; names
// starting with "ro" are read-only.
type fileCatalog struct {
	dir  string
	mu   sync.Mutex
	open int // devices open now
}

func (c *fileCatalog) info(name string) (ExportInfo, error) {
	fi, err := os.Stat(filepath.Join(c.dir, name))
	if name == "" || filepath.Base(name) != name || err != nil {
		return ExportInfo{}, errors.E(errors.NotExist, "no export "+name)
	}
	return ExportInfo{Name: name, Description: "file " + name, Size: fi.Size(), ReadOnly: name[:min(2, len(name))] == "ro",
		MinBlock: 1, PreferredBlock: 4096, MaxBlock: 1 << 20}, nil
}

func (c *fileCatalog) List(context.Context) ([]ExportInfo, error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, err
	}
	var out []ExportInfo
	for _, e := range ents {
		if info, err := c.info(e.Name()); err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

func (c *fileCatalog) Info(_ context.Context, name string) (ExportInfo, error) { return c.info(name) }

func (c *fileCatalog) Open(_ context.Context, name string) (Device, ExportInfo, error) {
	info, err := c.info(name)
	if err != nil {
		return nil, ExportInfo{}, err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_RDWR, 0)
	if err != nil {
		return nil, ExportInfo{}, err
	}
	c.mu.Lock()
	c.open++
	c.mu.Unlock()
	return closingDevice{fileDevice{f}, c}, info, nil
}

type closingDevice struct {
	fileDevice
	c *fileCatalog
}

func (d closingDevice) Close() error {
	d.c.mu.Lock()
	d.c.open--
	d.c.mu.Unlock()
	return d.f.Close()
}

// startServer serves the files of a new directory (created by mk) on a loopback port.
func startServer(t *testing.T, mk func(dir string)) (addr string, dir string, s *Server) {
	t.Helper()
	return startServerWith(t, mk, nil)
}

// startServerWith is startServer with the Server changed by set (if not nil) first.
func startServerWith(t *testing.T, mk func(dir string), set func(*Server)) (addr string, dir string, s *Server) {
	t.Helper()
	dir = t.TempDir()
	mk(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = &Server{Catalog: &fileCatalog{dir: dir}, HandshakeTimeout: 5 * time.Second, Log: testLogger(t)}
	if set != nil {
		set(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), dir, s
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// rawClient speaks the protocol byte by byte, for the requests real clients never send.
type rawClient struct {
	t *testing.T
	c net.Conn
}

func dial(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, c: c}
}

func (r *rawClient) read(n int) []byte {
	r.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r.c, b); err != nil {
		r.t.Fatalf("reading %d bytes: %v", n, err)
	}
	return b
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// greet reads the server's greeting and sends the client flags.
func (r *rawClient) greet(flags uint32) {
	r.t.Helper()
	g := r.read(18)
	if binary.BigEndian.Uint64(g) != magicInit || binary.BigEndian.Uint64(g[8:]) != magicOpt ||
		binary.BigEndian.Uint16(g[16:]) != flagFixedNewstyle|flagNoZeroes {
		r.t.Fatalf("greeting %x", g)
	}
	r.write(binary.BigEndian.AppendUint32(nil, flags))
}

func (r *rawClient) option(code uint32, data []byte) {
	b := binary.BigEndian.AppendUint64(nil, magicOpt)
	b = binary.BigEndian.AppendUint32(b, code)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	r.write(append(b, data...))
}

// optReply reads one option reply.
func (r *rawClient) optReply() (opt, typ uint32, data []byte) {
	r.t.Helper()
	h := r.read(20)
	if binary.BigEndian.Uint64(h) != magicOptReply {
		r.t.Fatalf("option reply magic %x", h[:8])
	}
	return binary.BigEndian.Uint32(h[8:]), binary.BigEndian.Uint32(h[12:]), r.read(int(binary.BigEndian.Uint32(h[16:])))
}

func goData(name string, items ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(items)))
	for _, it := range items {
		b = binary.BigEndian.AppendUint16(b, it)
	}
	return b
}

// goExport runs NBD_OPT_GO for name and returns the export's size and flags.
func (r *rawClient) goExport(name string) (uint64, uint16) {
	r.t.Helper()
	r.option(optGo, goData(name, infoBlockSize))
	var size uint64
	var flags uint16
	for {
		opt, typ, data := r.optReply()
		if opt != optGo {
			r.t.Fatalf("reply to option %d", opt)
		}
		switch typ {
		case repInfo:
			if binary.BigEndian.Uint16(data) == infoExport {
				size, flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
			}
		case repAck:
			return size, flags
		default:
			r.t.Fatalf("NBD_OPT_GO %q: reply %#x %q", name, typ, data)
		}
	}
}

func (r *rawClient) request(typ, flags uint16, cookie, off uint64, n uint32, payload []byte) {
	b := binary.BigEndian.AppendUint32(nil, magicRequest)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, n)
	r.write(append(b, payload...))
}

// simpleReply reads a simple reply and returns its error value (and n bytes of data if
// there was no error).
func (r *rawClient) simpleReply(cookie uint64, n int) (uint32, []byte) {
	r.t.Helper()
	h := r.read(16)
	if binary.BigEndian.Uint32(h) != magicSimple || binary.BigEndian.Uint64(h[8:]) != cookie {
		r.t.Fatalf("simple reply %x (cookie %d)", h, cookie)
	}
	errno := binary.BigEndian.Uint32(h[4:])
	if errno != 0 || n == 0 {
		return errno, nil
	}
	return 0, r.read(n)
}

// closed reports whether the server closed the connection (reading gets EOF or a reset).
func (r *rawClient) closed() bool {
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := r.c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestHandshakeRefusals(t *testing.T) {
	addr, _, _ := startServer(t, func(dir string) { writeFile(t, filepath.Join(dir, "disk"), make([]byte, 1<<20)) })
	for _, tc := range []struct {
		name string
		run  func(r *rawClient)
	}{
		{"oldstyle client flags", func(r *rawClient) { r.greet(0) }},
		{"unknown client flags", func(r *rawClient) { r.greet(clientFixedNewstyle | 1<<7) }},
		{"option with a bad magic", func(r *rawClient) {
			r.greet(clientFixedNewstyle)
			r.write(make([]byte, 16))
		}},
		{"option data too long", func(r *rawClient) {
			r.greet(clientFixedNewstyle)
			b := binary.BigEndian.AppendUint64(nil, magicOpt)
			b = binary.BigEndian.AppendUint32(b, optGo)
			r.write(binary.BigEndian.AppendUint32(b, 1<<30))
			if _, typ, _ := r.optReply(); typ != repErrInvalid {
				t.Errorf("reply %#x to a 1 GiB option", typ)
			}
		}},
		{"unknown export by name", func(r *rawClient) {
			r.greet(clientFixedNewstyle | clientNoZeroes)
			r.option(optExportName, []byte("nope"))
		}},
		{"abort", func(r *rawClient) {
			r.greet(clientFixedNewstyle)
			r.option(optAbort, nil)
			if _, typ, _ := r.optReply(); typ != repAck {
				t.Errorf("reply %#x to NBD_OPT_ABORT", typ)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dial(t, addr)
			r.t = t
			tc.run(r)
			if !r.closed() {
				t.Error("the server kept the connection open")
			}
		})
	}
}

func TestHandshakeOptions(t *testing.T) {
	addr, _, _ := startServer(t, func(dir string) {
		writeFile(t, filepath.Join(dir, "disk"), make([]byte, 1<<20))
		writeFile(t, filepath.Join(dir, "ro-disk"), make([]byte, 4096))
	})
	r := dial(t, addr)
	r.greet(clientFixedNewstyle | clientNoZeroes)

	r.option(optList, []byte("x"))
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("NBD_OPT_LIST with data: reply %#x", typ)
	}
	r.option(optList, nil)
	var names []string
	for {
		_, typ, data := r.optReply()
		if typ == repAck {
			break
		}
		if typ != repServer {
			t.Fatalf("NBD_OPT_LIST reply %#x", typ)
		}
		n := binary.BigEndian.Uint32(data)
		names = append(names, string(data[4:4+n]))
	}
	if len(names) != 2 || names[0] != "disk" || names[1] != "ro-disk" {
		t.Errorf("exports %q", names)
	}
	r.option(optStartTLS, nil)
	if _, typ, _ := r.optReply(); typ != repErrPolicy {
		t.Errorf("NBD_OPT_STARTTLS: reply %#x", typ)
	}
	r.option(99, []byte("?"))
	if _, typ, _ := r.optReply(); typ != repErrUnsup {
		t.Errorf("unknown option: reply %#x", typ)
	}
	r.option(optGo, []byte{0, 0, 0, 9, 'x'})
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("malformed NBD_OPT_GO: reply %#x", typ)
	}
	r.option(optInfo, goData("missing"))
	if _, typ, msg := r.optReply(); typ != repErrUnknown || !bytes.Contains(msg, []byte("missing")) {
		t.Errorf("NBD_OPT_INFO of an unknown export: reply %#x %q", typ, msg)
	}
	r.option(optInfo, goData("ro-disk", infoName, infoDescription, infoBlockSize))
	var got struct {
		size        uint64
		flags       uint16
		name, descr string
		minB, maxB  uint32
	}
	for {
		_, typ, data := r.optReply()
		if typ == repAck {
			break
		}
		switch binary.BigEndian.Uint16(data) {
		case infoExport:
			got.size, got.flags = binary.BigEndian.Uint64(data[2:]), binary.BigEndian.Uint16(data[10:])
		case infoName:
			got.name = string(data[2:])
		case infoDescription:
			got.descr = string(data[2:])
		case infoBlockSize:
			got.minB, got.maxB = binary.BigEndian.Uint32(data[2:]), binary.BigEndian.Uint32(data[10:])
		}
	}
	if got.size != 4096 || got.flags&tfReadOnly == 0 || got.name != "ro-disk" || got.descr != "file ro-disk" || got.minB != 1 || got.maxB != 1<<20 {
		t.Errorf("NBD_OPT_INFO: %+v", got)
	}
	r.option(optSetMetaContext, nil)
	if _, typ, _ := r.optReply(); typ != repErrInvalid {
		t.Errorf("NBD_OPT_SET_META_CONTEXT without structured replies: reply %#x", typ)
	}
	// Still negotiating after every refusal: the export opens.
	if size, _ := r.goExport("disk"); size != 1<<20 {
		t.Errorf("size %d", size)
	}
	r.request(cmdDisc, 0, 1, 0, 0, nil)
	if !r.closed() {
		t.Error("NBD_CMD_DISC did not close the connection")
	}
}

// Requests real clients do not send get errors and change nothing.
func TestBadRequests(t *testing.T) {
	orig := bytes.Repeat([]byte("cairn"), 1<<20/5+1)[:1<<20]
	addr, dir, _ := startServer(t, func(dir string) {
		writeFile(t, filepath.Join(dir, "disk"), orig)
		writeFile(t, filepath.Join(dir, "ro-disk"), orig[:8192])
	})
	unchanged := func(name string, want []byte) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s changed", name)
		}
	}
	r := dial(t, addr)
	r.greet(clientFixedNewstyle | clientNoZeroes)
	r.goExport("disk")
	for i, tc := range []struct {
		name       string
		typ, flags uint16
		off        uint64
		n          uint32
		payload    []byte
		want       uint32
	}{
		{"read past the end", cmdRead, 0, 1<<20 - 10, 20, nil, errInvalid},
		{"read at a huge offset", cmdRead, 0, 1 << 62, 1, nil, errInvalid},
		{"write past the end", cmdWrite, 0, 1<<20 - 1, 2, []byte("xx"), errNoSpace},
		{"trim past the end", cmdTrim, 0, 1 << 20, 1, nil, errNoSpace},
		{"zeroes past the end", cmdWriteZeroes, 0, 1<<63 + 1, 1, nil, errNoSpace},
		{"unknown command", 42, 0, 0, 0, nil, errInvalid},
		{"cache (not offered)", cmdCache, 0, 0, 10, nil, errInvalid},
		{"block status (not negotiated)", cmdBlockStatus, 0, 0, 10, nil, errInvalid},
		{"unknown flag", cmdWrite, 1 << 9, 0, 1, []byte("x"), errInvalid},
		{"fast zero (not offered)", cmdWriteZeroes, cmdFlagFast, 0, 10, nil, errInvalid},
		{"DF without structured replies", cmdRead, cmdFlagDF, 0, 10, nil, errInvalid},
		{"read over the maximum block size", cmdRead, 0, 0, 1<<20 + 1, nil, errOverflow},
	} {
		r.request(tc.typ, tc.flags, uint64(i), tc.off, tc.n, tc.payload)
		if errno, _ := r.simpleReply(uint64(i), 0); errno != tc.want {
			t.Errorf("%s: error %d, want %d", tc.name, errno, tc.want)
		}
	}
	// The connection still works.
	r.request(cmdRead, 0, 100, 5, 10, nil)
	if errno, data := r.simpleReply(100, 10); errno != 0 || !bytes.Equal(data, orig[5:15]) {
		t.Errorf("read after the refusals: %d %q", errno, data)
	}
	unchanged("disk", orig)

	t.Run("read-only export", func(t *testing.T) {
		r := dial(t, addr)
		r.greet(clientFixedNewstyle | clientNoZeroes)
		if _, flags := r.goExport("ro-disk"); flags&tfReadOnly == 0 {
			t.Error("read-only flag missing")
		}
		r.request(cmdWrite, 0, 1, 0, 3, []byte("abc"))
		if errno, _ := r.simpleReply(1, 0); errno != errPerm {
			t.Errorf("write to a read-only export: error %d", errno)
		}
		r.request(cmdTrim, 0, 2, 0, 4096, nil)
		if errno, _ := r.simpleReply(2, 0); errno != errPerm {
			t.Errorf("trim of a read-only export: error %d", errno)
		}
		unchanged("ro-disk", orig[:8192])
	})
	t.Run("oversized write", func(t *testing.T) {
		r := dial(t, addr)
		r.greet(clientFixedNewstyle | clientNoZeroes)
		r.goExport("disk")
		r.request(cmdWrite, 0, 7, 0, 1<<20+1, make([]byte, 4096))
		if errno, _ := r.simpleReply(7, 0); errno != errOverflow {
			t.Errorf("oversized write: error %d", errno)
		}
		if !r.closed() {
			t.Error("the server kept reading after an oversized write")
		}
		unchanged("disk", orig)
	})
	t.Run("disconnect in the middle of a write", func(t *testing.T) {
		r := dial(t, addr)
		r.greet(clientFixedNewstyle | clientNoZeroes)
		r.goExport("disk")
		r.request(cmdWrite, 0, 8, 0, 65536, bytes.Repeat([]byte{0xee}, 1000))
		r.c.Close()
		// The next connection's flush returns after the server saw the first one end:
		// its write, never complete, must not have reached the file.
		r2 := dial(t, addr)
		r2.greet(clientFixedNewstyle | clientNoZeroes)
		r2.goExport("disk")
		r2.request(cmdFlush, 0, 1, 0, 0, nil)
		if errno, _ := r2.simpleReply(1, 0); errno != 0 {
			t.Errorf("flush: %d", errno)
		}
		unchanged("disk", orig)
	})
}

func TestReadWrite(t *testing.T) {
	addr, dir, _ := startServer(t, func(dir string) { writeFile(t, filepath.Join(dir, "disk"), make([]byte, 1<<20)) })
	r := dial(t, addr)
	r.greet(clientFixedNewstyle | clientNoZeroes)
	r.option(optStructuredReply, nil)
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("NBD_OPT_STRUCTURED_REPLY: %#x", typ)
	}
	r.goExport("disk")
	// Many writes in flight at once, then reads of each.
	const n = 64
	for i := range n {
		r.request(cmdWrite, cmdFlagFUA*uint16(i%2), uint64(i), uint64(i)*8192, 8192, bytes.Repeat([]byte{byte(i + 1)}, 8192))
	}
	seen := map[uint64]bool{}
	for range n {
		h := r.read(16)
		c := binary.BigEndian.Uint64(h[8:])
		if binary.BigEndian.Uint32(h) != magicSimple || binary.BigEndian.Uint32(h[4:]) != 0 || seen[c] {
			t.Fatalf("write reply %x", h)
		}
		seen[c] = true
	}
	// Many reads in flight: their replies may share flushes, and every one arrives whole
	// (a reply left in the buffer would hang this loop).
	for i := range n {
		r.request(cmdRead, 0, uint64(500+i), uint64(i)*8192, 8192, nil)
	}
	seen = map[uint64]bool{}
	for range n {
		h := r.read(20)
		c := binary.BigEndian.Uint64(h[8:])
		if binary.BigEndian.Uint32(h) != magicStructure || binary.BigEndian.Uint16(h[6:]) != replyOffsetData ||
			binary.BigEndian.Uint32(h[16:]) != 8+8192 || c < 500 || c >= 500+n || seen[c] {
			t.Fatalf("read reply %x", h)
		}
		seen[c] = true
		d := r.read(8 + 8192)
		i := c - 500
		if binary.BigEndian.Uint64(d) != i*8192 || !bytes.Equal(d[8:], bytes.Repeat([]byte{byte(i + 1)}, 8192)) {
			t.Fatalf("read %d: wrong offset or data", i)
		}
	}
	r.request(cmdWriteZeroes, 0, 1000, 8192, 100, nil)
	if errno, _ := r.simpleReply(1000, 0); errno != 0 {
		t.Fatalf("write zeroes: %d", errno)
	}
	r.request(cmdRead, cmdFlagDF, 2000, 8192-4, 8, nil)
	h := r.read(20)
	if binary.BigEndian.Uint32(h) != magicStructure || binary.BigEndian.Uint16(h[4:]) != replyFlagDone ||
		binary.BigEndian.Uint16(h[6:]) != replyOffsetData || binary.BigEndian.Uint32(h[16:]) != 16 {
		t.Fatalf("structured read reply %x", h)
	}
	data := r.read(16)
	if binary.BigEndian.Uint64(data) != 8192-4 || !bytes.Equal(data[8:], []byte{1, 1, 1, 1, 0, 0, 0, 0}) {
		t.Errorf("read %x", data)
	}
	r.request(cmdRead, 0, 2001, 1<<20, 1, nil)
	h = r.read(20)
	if binary.BigEndian.Uint16(h[6:]) != replyError {
		t.Fatalf("structured error reply %x", h)
	}
	e := r.read(int(binary.BigEndian.Uint32(h[16:])))
	if binary.BigEndian.Uint32(e) != errInvalid || !bytes.Contains(e[6:], []byte("beyond the end")) {
		t.Errorf("error chunk %q", e)
	}
	r.request(cmdDisc, 0, 0, 0, 0, nil)
	if !r.closed() {
		t.Error("not closed after NBD_CMD_DISC")
	}
	b, err := os.ReadFile(filepath.Join(dir, "disk"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		want := bytes.Repeat([]byte{byte(i + 1)}, 8192)
		if i == 1 {
			copy(want, make([]byte, 100))
		}
		if !bytes.Equal(b[i*8192:(i+1)*8192], want) {
			t.Errorf("block %d wrong", i)
		}
	}
}

// A client that never finishes its handshake is disconnected.
func TestHandshakeTimeout(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Catalog: &fileCatalog{dir: dir}, HandshakeTimeout: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, ln)
	r := dial(t, ln.Addr().String())
	r.read(18)
	if !r.closed() {
		t.Error("a silent client kept its connection")
	}
}
