// Package nbd serves block devices over the Network Block Device protocol: the fixed
// newstyle handshake (export list, NBD_OPT_INFO and NBD_OPT_GO with block-size
// constraints, structured replies), then the transmission phase (READ, WRITE, FLUSH,
// TRIM, WRITE_ZEROES, with FUA), several requests in flight per connection. It knows
// nothing of volumes: a Device is any io.ReaderAt/io.WriterAt with Flush and Trim, found
// by export name through a Catalog. NBD has no authentication of its own: a server
// with Server.TLS offers NBD_OPT_STARTTLS, and with Server.TLSRequired serves nothing
// before it (the protocol's forced TLS mode); the caller's tls.Config must require and
// verify client certificates, and Server.Authorize says which exports a certificate
// opens. Who may connect at all is the caller's decision too (Server.Allow). The protocol is the one documented in the NBD
// project's doc/proto.md; nothing here is copied from another implementation.
package nbd

import (
	"encoding/binary"
	"io"
)

// Handshake.
const (
	magicInit      = 0x4e42444d41474943 // "NBDMAGIC"
	magicOpt       = 0x49484156454f5054 // "IHAVEOPT"
	magicOptReply  = 0x3e889045565a9
	magicRequest   = 0x25609513
	magicSimple    = 0x67446698
	magicStructure = 0x668e33ef

	flagFixedNewstyle = 1 << 0 // handshake flags (server)
	flagNoZeroes      = 1 << 1

	clientFixedNewstyle = 1 << 0 // client flags
	clientNoZeroes      = 1 << 1
)

// Options.
const (
	optExportName       = 1
	optAbort            = 2
	optList             = 3
	optStartTLS         = 5
	optInfo             = 6
	optGo               = 7
	optStructuredReply  = 8
	optListMetaContext  = 9
	optSetMetaContext   = 10
	optExtendedHeaders  = 11
	maxOptionLength     = 64 << 10 // options carry names and a few numbers
	maxOptions          = 128      // options per handshake before the server gives up
	maxNameLength       = 4096     // the protocol's limit for a string
	repAck              = 1
	repServer           = 2
	repInfo             = 3
	repErrUnsup         = 1<<31 + 1
	repErrPolicy        = 1<<31 + 2
	repErrInvalid       = 1<<31 + 3
	repErrTLSReqd       = 1<<31 + 5
	repErrUnknown       = 1<<31 + 6
	repErrShutdown      = 1<<31 + 7
	repErrBlockSizeReqd = 1<<31 + 8
	infoExport          = 0
	infoName            = 1
	infoDescription     = 2
	infoBlockSize       = 3
)

// Transmission flags.
const (
	tfHasFlags        = 1 << 0
	tfReadOnly        = 1 << 1
	tfSendFlush       = 1 << 2
	tfSendFUA         = 1 << 3
	tfSendTrim        = 1 << 5
	tfSendWriteZeroes = 1 << 6
	tfSendDF          = 1 << 7
	tfCanMultiConn    = 1 << 8
)

// Commands and their flags.
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdCache       = 5
	cmdWriteZeroes = 6
	cmdBlockStatus = 7

	cmdFlagFUA    = 1 << 0
	cmdFlagNoHole = 1 << 1
	cmdFlagDF     = 1 << 2
	cmdFlagFast   = 1 << 4
)

// Structured reply chunk types.
const (
	replyFlagDone   = 1
	replyNone       = 0
	replyOffsetData = 1
	replyError      = 1<<15 + 1
)

// Error values of the transmission phase (the protocol fixes them; they are errno
// values on Linux).
const (
	errPerm     = 1
	errIO       = 5
	errNoMem    = 12
	errInvalid  = 22
	errNoSpace  = 28
	errOverflow = 75
	errNotSup   = 95
	errShutdown = 108
)

// request is a transmission-phase request header (28 bytes on the wire).
type request struct {
	flags  uint16
	typ    uint16
	cookie uint64
	offset uint64
	length uint32
}

const requestSize = 28

// parseRequest decodes a request header; ok is false if the magic is wrong.
func parseRequest(b *[requestSize]byte) (r request, ok bool) {
	if binary.BigEndian.Uint32(b[0:]) != magicRequest {
		return request{}, false
	}
	return request{
		flags:  binary.BigEndian.Uint16(b[4:]),
		typ:    binary.BigEndian.Uint16(b[6:]),
		cookie: binary.BigEndian.Uint64(b[8:]),
		offset: binary.BigEndian.Uint64(b[16:]),
		length: binary.BigEndian.Uint32(b[24:]),
	}, true
}

// option is one option the client sent in the handshake.
type option struct {
	code uint32
	data []byte
}

// readOption reads one option; a length over maxOptionLength is an error after which
// the connection cannot continue (the data is not read).
func readOption(r io.Reader) (option, error) {
	var h [16]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return option{}, err
	}
	if binary.BigEndian.Uint64(h[0:]) != magicOpt {
		return option{}, errBadMagic
	}
	o := option{code: binary.BigEndian.Uint32(h[8:])}
	n := binary.BigEndian.Uint32(h[12:])
	if n > maxOptionLength {
		return o, errOptionTooLong
	}
	o.data = make([]byte, n)
	if _, err := io.ReadFull(r, o.data); err != nil {
		return option{}, err
	}
	return o, nil
}

// infoRequest is the body of NBD_OPT_INFO and NBD_OPT_GO: an export name and the
// information items the client asks for.
type infoRequest struct {
	name  string
	items []uint16
}

// parseInfoRequest decodes the body of NBD_OPT_INFO/NBD_OPT_GO.
func parseInfoRequest(b []byte) (infoRequest, bool) {
	if len(b) < 4 {
		return infoRequest{}, false
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) || n > maxNameLength {
		return infoRequest{}, false
	}
	req := infoRequest{name: string(b[:n])}
	b = b[n:]
	if len(b) < 2 {
		return infoRequest{}, false
	}
	k := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) != 2*k {
		return infoRequest{}, false
	}
	for i := 0; i < k; i++ {
		req.items = append(req.items, binary.BigEndian.Uint16(b[2*i:]))
	}
	return req, true
}

// appendOptReply appends an option reply header and its data.
func appendOptReply(b []byte, opt, typ uint32, data []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, magicOptReply)
	b = binary.BigEndian.AppendUint32(b, opt)
	b = binary.BigEndian.AppendUint32(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// appendSimpleReply appends a simple reply header.
func appendSimpleReply(b []byte, errno uint32, cookie uint64) []byte {
	b = binary.BigEndian.AppendUint32(b, magicSimple)
	b = binary.BigEndian.AppendUint32(b, errno)
	return binary.BigEndian.AppendUint64(b, cookie)
}

// appendChunkHeader appends a structured reply chunk header of a payload of n bytes.
func appendChunkHeader(b []byte, flags, typ uint16, cookie uint64, n uint32) []byte {
	b = binary.BigEndian.AppendUint32(b, magicStructure)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint64(b, cookie)
	return binary.BigEndian.AppendUint32(b, n)
}
