package nbd

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// Device is the block device behind an export.
type Device interface {
	io.ReaderAt
	// WriteAt writes len(p) bytes at off; it returns only once they are written, not
	// necessarily durable (Flush).
	io.WriterAt
	// Flush returns once every write that returned before it was called is durable.
	Flush() error
	// Trim says the range's contents are no longer needed: reads of it may return
	// anything until it is written again.
	Trim(off, n int64) error
}

// Zeroer is a Device that writes zeroes without being sent them (NBD_CMD_WRITE_ZEROES);
// a Device without it gets buffers of zeroes.
type Zeroer interface {
	WriteZeroes(off, n int64) error
}

// ExportInfo describes an export.
type ExportInfo struct {
	Name        string
	Description string
	Size        int64
	ReadOnly    bool
	// MultiConn says that several connections to the export see each other's writes and
	// that a flush on one covers writes answered on all (NBD_FLAG_CAN_MULTI_CONN).
	MultiConn bool
	// MinBlock, PreferredBlock and MaxBlock are the block-size constraints announced to
	// clients (0: 1 byte, 4 KiB, MaxPayload).
	MinBlock, PreferredBlock, MaxBlock uint32
}

// Catalog finds exports. Errors of kind NotExist say there is no such export, Permission
// that this client may not have it; any other error is reported to the client as a
// server-side failure.
type Catalog interface {
	List(ctx context.Context) ([]ExportInfo, error)
	Info(ctx context.Context, name string) (ExportInfo, error)
	// Open opens an export for a connection's transmission phase; if the Device is an
	// io.Closer it is closed when the connection ends.
	Open(ctx context.Context, name string) (Device, ExportInfo, error)
}

// MaxPayload is the largest READ or WRITE a client may send (the protocol's recommended
// maximum block size).
const MaxPayload = 32 << 20

// Server serves NBD connections.
type Server struct {
	Catalog Catalog
	// Allow, if set, decides whether a client address may connect at all (a refused
	// client is disconnected before the handshake).
	Allow func(net.Addr) bool
	// TLS, if set, is what NBD_OPT_STARTTLS starts (without it the option is refused
	// with NBD_REP_ERR_POLICY). Its ClientAuth must be tls.RequireAndVerifyClientCert:
	// the verified client certificate is the connection's authentication (Serve refuses
	// any other setting). Options negotiated before TLS are forgotten once it starts.
	TLS *tls.Config
	// TLSRequired is the protocol's forced TLS mode: before TLS every option but
	// NBD_OPT_STARTTLS and NBD_OPT_ABORT is answered NBD_REP_ERR_TLS_REQD, and
	// NBD_OPT_EXPORT_NAME closes the connection. It needs TLS.
	TLSRequired bool
	// Authorize, if set, says whether a connection may see and open an export: cs is the
	// connection's TLS state (nil for a plain connection). Exports it refuses are left
	// out of NBD_OPT_LIST and refused with NBD_REP_ERR_POLICY (NBD_OPT_EXPORT_NAME: the
	// connection is closed).
	Authorize func(cs *tls.ConnectionState, export string) bool
	// Log, nil means slog.Default().
	Log *slog.Logger
	// HandshakeTimeout bounds the whole handshake, a TLS handshake included (default
	// 10 s): a client that connects and never finishes is disconnected. A request's payload
	// must arrive within PayloadTimeout of its header (default 60 s). The transmission
	// phase itself has no idle limit: an attached VM may stay idle for days.
	HandshakeTimeout, PayloadTimeout time.Duration
	// MaxInflight bounds the requests a connection has in flight (default 64), and
	// MaxInflightBytes their payload bytes (default 64 MiB).
	MaxInflight      int
	MaxInflightBytes int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// tlsConns are the connections in their transmission phase over TLS, with the
	// client certificate that authenticated them (Drop).
	tlsConns map[net.Conn]*x509.Certificate
	dropped  func(*x509.Certificate) error // Drop's last check, for connections that finish their handshake after it
}

// Drop closes every connection in its transmission phase whose client certificate
// check refuses now (a certificate revoked after the connection was authenticated), logs
// each with the reason, and returns how many it closed. Requests in flight on them fail
// with the connection; a write the client was not answered for may or may not be done,
// as with any lost connection. Plain connections are not checked.
func (s *Server) Drop(check func(*x509.Certificate) error) int {
	type victim struct {
		c   net.Conn
		err error
	}
	var vs []victim
	s.mu.Lock()
	s.dropped = check
	for c, cert := range s.tlsConns {
		if err := check(cert); err != nil {
			vs = append(vs, victim{c, err})
			delete(s.tlsConns, c)
		}
	}
	s.mu.Unlock()
	for _, v := range vs {
		s.log().Warn("nbd: closed a connection whose client certificate is no longer accepted", "client", v.c.RemoteAddr().String(), "err", v.err)
		v.c.Close()
	}
	return len(vs)
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Validate checks the TLS settings.
func (s *Server) Validate() error {
	if s.TLSRequired && s.TLS == nil {
		return errors.E(errors.Invalid, "nbd: TLS required without a TLS configuration")
	}
	if s.TLS != nil && s.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return errors.E(errors.Invalid, "nbd: the TLS configuration must require and verify client certificates")
	}
	return nil
}

// Serve accepts connections on ln until ctx ends or ln fails; it closes ln and every
// connection when ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Validate(); err != nil {
		ln.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if s.Allow != nil && !s.Allow(c.RemoteAddr()) {
			s.log().Warn("nbd: connection refused by the allow-list", "client", c.RemoteAddr().String())
			c.Close()
			continue
		}
		s.mu.Lock()
		if s.conns == nil {
			s.conns = map[net.Conn]struct{}{}
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.ServeConn(ctx, c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// ServeConn runs the handshake and the transmission phase on c, and closes c.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	log := s.log().With("component", "nbd", "client", c.RemoteAddr().String())
	hs := &handshake{s: s, c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}
	dev, info, err := hs.run(ctx)
	if hs.c != c {
		defer hs.c.Close() // the TLS connection: a close_notify, then c
	}
	if err != nil {
		switch {
		case hs.refused && !hs.tlsStarted && s.TLSRequired:
			log.Warn("nbd: refused a client that did not start TLS: this listener requires it", "err", err)
		case hs.refused:
			log.Warn("nbd: connection refused", "tls", hs.cs != nil, "err", err)
		case err != errAborted && !errors.Is(errors.Transient, err):
			log.Info("nbd: handshake ended", "err", err)
		}
		return
	}
	if cl, ok := dev.(io.Closer); ok {
		defer cl.Close()
	}
	if hs.cs != nil {
		cert := hs.cs.PeerCertificates[0]
		log = log.With("tls", true, "client_cert", cert.Subject.CommonName)
		s.mu.Lock()
		if s.tlsConns == nil {
			s.tlsConns = map[net.Conn]*x509.Certificate{}
		}
		s.tlsConns[c] = cert
		var err error
		if s.dropped != nil {
			err = s.dropped(cert) // revoked between its handshake's check and now
		}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.tlsConns, c)
			s.mu.Unlock()
		}()
		if err != nil {
			log.Warn("nbd: closed a connection whose client certificate is no longer accepted", "err", err)
			return
		}
	}
	t := &transmission{s: s, c: hs.c, r: hs.r, w: hs.w, dev: dev, info: info, structured: hs.structured, log: log.With("export", info.Name)}
	t.run(ctx)
}

var (
	errBadMagic      = errors.New("nbd: bad magic number")
	errOptionTooLong = errors.New("nbd: option data too long")
	errAborted       = errors.New("nbd: client aborted the handshake")
)

// handshake is the option haggling of one connection.
type handshake struct {
	s          *Server
	c          net.Conn // the TLS connection once NBD_OPT_STARTTLS succeeded
	r          *bufio.Reader
	w          *bufio.Writer
	noZeroes   bool
	structured bool
	cs         *tls.ConnectionState // nil: no TLS (yet)
	tlsStarted bool                 // NBD_OPT_STARTTLS was acknowledged
	refused    bool                 // the error says the client was refused (logged as a warning)
}

// refuse marks the handshake's end as a refusal of the client.
func (h *handshake) refuse(err error) error {
	h.refused = true
	return err
}

func (h *handshake) run(ctx context.Context) (Device, ExportInfo, error) {
	timeout := h.s.HandshakeTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	h.c.SetDeadline(time.Now().Add(timeout))
	defer h.c.SetDeadline(time.Time{})
	var b []byte
	b = binary.BigEndian.AppendUint64(b, magicInit)
	b = binary.BigEndian.AppendUint64(b, magicOpt)
	b = binary.BigEndian.AppendUint16(b, flagFixedNewstyle|flagNoZeroes)
	if err := h.send(b); err != nil {
		return nil, ExportInfo{}, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(h.r, cf[:]); err != nil {
		return nil, ExportInfo{}, err
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^(clientFixedNewstyle|clientNoZeroes) != 0 || flags&clientFixedNewstyle == 0 {
		return nil, ExportInfo{}, fmt.Errorf("nbd: client flags %#x: only the fixed newstyle handshake is served", flags)
	}
	h.noZeroes = flags&clientNoZeroes != 0
	for range maxOptions {
		o, err := readOption(h.r)
		if err == errOptionTooLong {
			// The data was not read: the stream cannot be resynchronized.
			h.send(appendOptReply(nil, o.code, repErrInvalid, []byte("option data too long")))
			return nil, ExportInfo{}, err
		}
		if err != nil {
			return nil, ExportInfo{}, err
		}
		dev, info, done, err := h.option(ctx, o)
		if err != nil || done {
			return dev, info, err
		}
	}
	return nil, ExportInfo{}, fmt.Errorf("nbd: more than %d options in one handshake", maxOptions)
}

func (h *handshake) send(b []byte) error {
	if _, err := h.w.Write(b); err != nil {
		return err
	}
	return h.w.Flush()
}

// reply sends an option reply.
func (h *handshake) reply(opt, typ uint32, data []byte) error {
	return h.send(appendOptReply(nil, opt, typ, data))
}

// option handles one option; done says the transmission phase starts with dev.
func (h *handshake) option(ctx context.Context, o option) (dev Device, info ExportInfo, done bool, err error) {
	if h.s.TLSRequired && h.cs == nil {
		switch o.code {
		case optStartTLS, optAbort:
		case optExportName:
			// It cannot be answered with an error: the connection is closed.
			return nil, ExportInfo{}, false, h.refuse(errors.New("nbd: NBD_OPT_EXPORT_NAME before TLS on a listener that requires TLS"))
		default:
			h.refused = true // if the client gives up here, it was refused for want of TLS
			return nil, ExportInfo{}, false, h.reply(o.code, repErrTLSReqd, []byte("this NBD listener requires TLS (NBD_OPT_STARTTLS) with a client certificate"))
		}
	}
	switch o.code {
	case optExportName:
		// No option reply: success is the export's size and flags, failure a closed
		// connection (the protocol has no other way to say it).
		if !h.authorized(string(o.data)) {
			return nil, ExportInfo{}, false, h.refuse(fmt.Errorf("nbd: export %q: not allowed to this client", o.data))
		}
		dev, info, err := h.s.Catalog.Open(ctx, string(o.data))
		if err != nil {
			return nil, ExportInfo{}, false, fmt.Errorf("nbd: export %q: %w", o.data, err)
		}
		b := binary.BigEndian.AppendUint64(nil, uint64(info.Size))
		b = binary.BigEndian.AppendUint16(b, transmissionFlags(info))
		if !h.noZeroes {
			b = append(b, make([]byte, 124)...)
		}
		if err := h.send(b); err != nil {
			closeDevice(dev)
			return nil, ExportInfo{}, false, err
		}
		return dev, info, true, nil
	case optAbort:
		h.reply(o.code, repAck, nil)
		return nil, ExportInfo{}, false, errAborted
	case optList:
		if len(o.data) != 0 {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("NBD_OPT_LIST takes no data"))
		}
		list, err := h.s.Catalog.List(ctx)
		if err != nil {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrShutdown, []byte(err.Error()))
		}
		var b []byte
		for _, e := range list {
			if !h.authorized(e.Name) {
				continue
			}
			d := binary.BigEndian.AppendUint32(nil, uint32(len(e.Name)))
			d = append(d, e.Name...)
			d = append(d, e.Description...)
			b = appendOptReply(b, o.code, repServer, d)
		}
		return nil, ExportInfo{}, false, h.send(appendOptReply(b, o.code, repAck, nil))
	case optInfo, optGo:
		req, ok := parseInfoRequest(o.data)
		if !ok {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("malformed NBD_OPT_INFO/NBD_OPT_GO request"))
		}
		if !h.authorized(req.name) {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrPolicy, []byte(fmt.Sprintf("export %q is not allowed to this client", req.name)))
		}
		var dev Device
		var info ExportInfo
		var err error
		if o.code == optGo {
			dev, info, err = h.s.Catalog.Open(ctx, req.name)
		} else {
			info, err = h.s.Catalog.Info(ctx, req.name)
		}
		if err != nil {
			return nil, ExportInfo{}, false, h.reply(o.code, catalogError(err), []byte(err.Error()))
		}
		b := infoReplies(o.code, info, req.items)
		if err := h.send(appendOptReply(b, o.code, repAck, nil)); err != nil {
			closeDevice(dev)
			return nil, ExportInfo{}, false, err
		}
		return dev, info, o.code == optGo, nil
	case optStructuredReply:
		if len(o.data) != 0 {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("NBD_OPT_STRUCTURED_REPLY takes no data"))
		}
		h.structured = true
		return nil, ExportInfo{}, false, h.reply(o.code, repAck, nil)
	case optListMetaContext, optSetMetaContext:
		// No metadata context is offered (not even base:allocation): an ACK without any
		// NBD_REP_META_CONTEXT reply says so, and clients then read every block.
		if o.code == optSetMetaContext && !h.structured {
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("metadata contexts need structured replies"))
		}
		return nil, ExportInfo{}, false, h.reply(o.code, repAck, nil)
	case optStartTLS:
		switch {
		case h.s.TLS == nil:
			return nil, ExportInfo{}, false, h.reply(o.code, repErrPolicy, []byte("TLS is not offered on this NBD listener"))
		case h.cs != nil:
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("TLS is already on"))
		case len(o.data) != 0:
			return nil, ExportInfo{}, false, h.reply(o.code, repErrInvalid, []byte("NBD_OPT_STARTTLS takes no data"))
		}
		return nil, ExportInfo{}, false, h.startTLS(ctx)
	default:
		return nil, ExportInfo{}, false, h.reply(o.code, repErrUnsup, []byte(fmt.Sprintf("option %d is not supported", o.code)))
	}
}

// startTLS acknowledges NBD_OPT_STARTTLS and runs the TLS handshake (under the
// handshake's deadline, set on the connection); the haggling goes on inside TLS, with
// what was negotiated before forgotten.
func (h *handshake) startTLS(ctx context.Context) error {
	if err := h.reply(optStartTLS, repAck, nil); err != nil {
		return err
	}
	h.tlsStarted = true
	if h.r.Buffered() > 0 {
		// Bytes sent after NBD_OPT_STARTTLS before the server's answer would be taken as
		// the first bytes of TLS: a client that does this is not speaking the protocol.
		return h.refuse(errors.New("nbd: the client sent data after NBD_OPT_STARTTLS before the TLS handshake"))
	}
	tc := tls.Server(h.c, h.s.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return h.refuse(fmt.Errorf("nbd: TLS handshake: %w", err))
	}
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		// The configuration requires a verified certificate (Validate); never serve without one.
		tc.Close()
		return h.refuse(errors.New("nbd: TLS without a verified client certificate"))
	}
	h.c, h.cs = tc, &cs
	h.r, h.w = bufio.NewReaderSize(tc, 64<<10), bufio.NewWriterSize(tc, 64<<10)
	h.structured, h.refused = false, false
	return nil
}

// authorized says whether this connection may see and open export name.
func (h *handshake) authorized(name string) bool {
	return h.s.Authorize == nil || h.s.Authorize(h.cs, name)
}

// infoReplies encodes the NBD_REP_INFO replies for an export: always its size and
// flags, the block sizes, and the name and description if asked for.
func infoReplies(opt uint32, info ExportInfo, items []uint16) []byte {
	d := binary.BigEndian.AppendUint16(nil, infoExport)
	d = binary.BigEndian.AppendUint64(d, uint64(info.Size))
	d = binary.BigEndian.AppendUint16(d, transmissionFlags(info))
	b := appendOptReply(nil, opt, repInfo, d)
	minB, prefB, maxB := blockSizes(info)
	d = binary.BigEndian.AppendUint16(nil, infoBlockSize)
	d = binary.BigEndian.AppendUint32(d, minB)
	d = binary.BigEndian.AppendUint32(d, prefB)
	d = binary.BigEndian.AppendUint32(d, maxB)
	b = appendOptReply(b, opt, repInfo, d)
	for _, it := range items {
		switch it {
		case infoName:
			d = binary.BigEndian.AppendUint16(nil, infoName)
			b = appendOptReply(b, opt, repInfo, append(d, info.Name...))
		case infoDescription:
			if info.Description != "" {
				d = binary.BigEndian.AppendUint16(nil, infoDescription)
				b = appendOptReply(b, opt, repInfo, append(d, info.Description...))
			}
		}
	}
	return b
}

// blockSizes returns an export's block-size constraints with the defaults filled in.
func blockSizes(info ExportInfo) (minB, prefB, maxB uint32) {
	minB, prefB, maxB = info.MinBlock, info.PreferredBlock, info.MaxBlock
	if minB == 0 {
		minB = 1
	}
	if prefB == 0 {
		prefB = 4096
	}
	if maxB == 0 || maxB > MaxPayload {
		maxB = MaxPayload
	}
	prefB = max(prefB, minB)
	return minB, prefB, maxB
}

func transmissionFlags(info ExportInfo) uint16 {
	f := uint16(tfHasFlags | tfSendFlush | tfSendFUA | tfSendTrim | tfSendWriteZeroes | tfSendDF)
	if info.ReadOnly {
		f |= tfReadOnly
	}
	if info.MultiConn {
		f |= tfCanMultiConn
	}
	return f
}

// catalogError maps a Catalog error to an option error reply.
func catalogError(err error) uint32 {
	switch {
	case errors.Is(errors.NotExist, err):
		return repErrUnknown
	case errors.Is(errors.Permission, err):
		return repErrPolicy
	}
	return repErrShutdown
}

func closeDevice(d Device) {
	if cl, ok := d.(io.Closer); ok {
		cl.Close()
	}
}
