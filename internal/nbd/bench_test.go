package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// benchCatalog serves one in-memory export "m" with 1 MiB requests allowed.
type benchCatalog struct{ d *memDevice }

func (c benchCatalog) info() ExportInfo {
	return ExportInfo{Name: "m", Size: int64(len(c.d.b)), MaxBlock: 1 << 20, MultiConn: true}
}
func (c benchCatalog) List(context.Context) ([]ExportInfo, error) { return []ExportInfo{c.info()}, nil }
func (c benchCatalog) Info(context.Context, string) (ExportInfo, error) {
	return c.info(), nil
}
func (c benchCatalog) Open(context.Context, string) (Device, ExportInfo, error) {
	return c.d, c.info(), nil
}

// BenchmarkTLS measures the protocol layer alone, plain against TLS 1.3 (AES-GCM), over
// loopback with an in-memory device: reads and writes of 4 KiB and 1 MiB, 16 in flight.
// What TLS costs a volume is in docs/benchmarks.md (tools/volbench --tls).
func BenchmarkTLS(b *testing.B) {
	p := newPKI(b)
	cert := p.clientCert("bench", "*")
	for _, mode := range []string{"plain", "tls"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		s := &Server{Catalog: benchCatalog{&memDevice{b: make([]byte, 64<<20)}}, Log: slog.New(slog.DiscardHandler)}
		if mode == "tls" {
			s.TLS, s.TLSRequired = p.serverConfig(), true
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Serve(ctx, ln); close(done) }()
		for _, op := range []struct {
			name string
			typ  uint16
			size uint32
		}{{"read4k", cmdRead, 4 << 10}, {"write4k", cmdWrite, 4 << 10}, {"read1m", cmdRead, 1 << 20}, {"write1m", cmdWrite, 1 << 20}} {
			b.Run(mode+"/"+op.name, func(b *testing.B) {
				c, err := benchConnect(ln.Addr().String(), mode == "tls", p.clientConfig(cert))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				b.SetBytes(int64(op.size))
				b.ResetTimer()
				if err := benchRun(c, op.typ, op.size, b.N, 16); err != nil {
					b.Fatal(err)
				}
			})
		}
		cancel()
		<-done
	}
}

// benchConnect greets, starts TLS if asked, and opens export "m".
func benchConnect(addr string, withTLS bool, cfg *tls.Config) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var g [18]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		return nil, err
	}
	c.Write(binary.BigEndian.AppendUint32(nil, clientFixedNewstyle|clientNoZeroes))
	readReplies := func(conn net.Conn) error {
		for {
			var h [20]byte
			if _, err := io.ReadFull(conn, h[:]); err != nil {
				return err
			}
			if _, err := io.CopyN(io.Discard, conn, int64(binary.BigEndian.Uint32(h[16:]))); err != nil {
				return err
			}
			if typ := binary.BigEndian.Uint32(h[12:]); typ != repInfo {
				if typ != repAck {
					return io.ErrUnexpectedEOF
				}
				return nil
			}
		}
	}
	conn := c
	if withTLS {
		c.Write(optBytes(optStartTLS, nil))
		if err := readReplies(c); err != nil {
			return nil, err
		}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		conn = tc
	}
	conn.Write(optBytes(optGo, goData("m")))
	if err := readReplies(conn); err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return conn, nil
}

// benchRun sends n requests of typ and size, depth in flight, and reads their replies.
func benchRun(c net.Conn, typ uint16, size uint32, n, depth int) error {
	slots := make(chan struct{}, depth)
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(c, 1<<20)
		payload := make([]byte, size)
		var hb [requestSize]byte
		for i := range n {
			slots <- struct{}{}
			binary.BigEndian.PutUint32(hb[0:], magicRequest)
			binary.BigEndian.PutUint16(hb[4:], 0)
			binary.BigEndian.PutUint16(hb[6:], typ)
			binary.BigEndian.PutUint64(hb[8:], uint64(i))
			binary.BigEndian.PutUint64(hb[16:], uint64(i%32)*uint64(size)%(64<<20-uint64(size)))
			binary.BigEndian.PutUint32(hb[24:], size)
			w.Write(hb[:])
			if typ == cmdWrite {
				w.Write(payload)
			}
			if len(slots) == depth || i == n-1 {
				if err := w.Flush(); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- nil
	}()
	r := bufio.NewReaderSize(c, 1<<20)
	for range n {
		var h [16]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(h[4:]) != 0 {
			return io.ErrUnexpectedEOF
		}
		if typ == cmdRead {
			if _, err := r.Discard(int(size)); err != nil {
				return err
			}
		}
		<-slots
	}
	return <-errc
}
