package nbd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// memDevice is a device in memory, for the fuzzer.
type memDevice struct {
	mu sync.Mutex
	b  []byte
}

func (d *memDevice) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(p, d.b[off:]), nil
}

func (d *memDevice) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(d.b[off:], p), nil
}

func (d *memDevice) Flush() error            { return nil }
func (d *memDevice) Trim(off, n int64) error { return writeZeroes(zeroOnly{d}, off, n) }

type memCatalog struct{ d *memDevice }

func (c memCatalog) info(name string) (ExportInfo, error) {
	if name != "m" {
		return ExportInfo{}, errors.E(errors.NotExist, "no export "+name)
	}
	return ExportInfo{Name: "m", Size: int64(len(c.d.b)), MaxBlock: 64 << 10}, nil
}
func (c memCatalog) List(context.Context) ([]ExportInfo, error) {
	i, _ := c.info("m")
	return []ExportInfo{i}, nil
}
func (c memCatalog) Info(_ context.Context, name string) (ExportInfo, error) { return c.info(name) }
func (c memCatalog) Open(_ context.Context, name string) (Device, ExportInfo, error) {
	i, err := c.info(name)
	return c.d, i, err
}

// FuzzSession feeds arbitrary client bytes to a whole connection (handshake, options,
// requests): the server must neither panic nor hang, and never write outside the export.
func FuzzSession(f *testing.F) {
	hello := binary.BigEndian.AppendUint32(nil, clientFixedNewstyle|clientNoZeroes)
	opt := func(b []byte, code uint32, data []byte) []byte {
		b = binary.BigEndian.AppendUint64(b, magicOpt)
		b = binary.BigEndian.AppendUint32(b, code)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		return append(b, data...)
	}
	req := func(b []byte, typ, flags uint16, off uint64, n uint32, payload []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, magicRequest)
		b = binary.BigEndian.AppendUint16(b, flags)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint64(b, 1)
		b = binary.BigEndian.AppendUint64(b, off)
		b = binary.BigEndian.AppendUint32(b, n)
		return append(b, payload...)
	}
	f.Add(opt(append([]byte(nil), hello...), optList, nil))
	f.Add(opt(opt(append([]byte(nil), hello...), optStructuredReply, nil), optInfo, goData("m", infoName)))
	s := opt(append([]byte(nil), hello...), optGo, goData("m", infoBlockSize))
	s = req(s, cmdWrite, cmdFlagFUA, 10, 4, []byte("abcd"))
	s = req(s, cmdRead, 0, 0, 100, nil)
	s = req(s, cmdWriteZeroes, 0, 4000, 96, nil)
	s = req(s, cmdTrim, 0, 0, 4096, nil)
	s = req(s, cmdFlush, 0, 0, 0, nil)
	f.Add(req(s, cmdDisc, 0, 0, 0, nil))
	f.Add(opt(append([]byte(nil), hello...), optExportName, []byte("m")))
	// The same sessions against a listener that requires TLS and one that offers it (a
	// first byte that is not zero selects: odd requires it, and a client without TLS
	// must then get nothing; even offers it), and STARTTLS followed by bytes that are no
	// TLS handshake.
	tlsCfg := fuzzTLSConfig(f)
	seeds := [][]byte{opt(append([]byte(nil), hello...), optList, nil), s, opt(append([]byte(nil), hello...), optExportName, []byte("m")),
		append(opt(append([]byte(nil), hello...), optStartTLS, nil), 0x16, 3, 1, 0, 5, 1, 0, 0, 1, 0)}
	for _, sd := range seeds {
		f.Add(append([]byte{1}, sd...))
		f.Add(append([]byte{2}, sd...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		dev := &memDevice{b: make([]byte, 4096)}
		srv := &Server{Catalog: memCatalog{dev}, HandshakeTimeout: 5 * time.Second, PayloadTimeout: 5 * time.Second, Log: slog.New(slog.DiscardHandler)}
		required := false
		if len(in) > 0 && in[0] != 0 {
			required = in[0]&1 == 1
			srv.TLS, srv.TLSRequired = tlsCfg, required
			in = in[1:]
		}
		client, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			srv.ServeConn(context.Background(), server)
			close(done)
		}()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not end the connection")
		}
		if len(dev.b) != 4096 {
			t.Fatalf("device grew to %d bytes", len(dev.b))
		}
		if required && !bytes.Equal(dev.b, make([]byte, 4096)) {
			t.Fatal("a client without TLS wrote to a listener that requires TLS")
		}
	})
}

// fuzzTLSConfig is a TLS configuration of a throwaway CA (no client of the fuzzer can
// complete a handshake with it).
func fuzzTLSConfig(f *testing.F) *tls.Config {
	return newPKI(f).serverConfig()
}
