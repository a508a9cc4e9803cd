package rpc

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"net"
	"sync"
	"time"
)

// The Raft channel. A connection opens with a challenge-response in which both sides
// prove they hold the cluster secret over fresh nonces (so a captured opening cannot be
// replayed), and each derives two session keys from those nonces. After it, every byte
// travels in frames, each authenticated with the sender's session key over its sequence
// number: injected, changed, dropped, reordered or replayed bytes fail the next frame's
// check, and the connection is closed.
//
//	dialer -> server: "CRFT" nonceC(16)
//	server -> dialer: nonceS(16) HMAC(k_raft, "server", nonceC, nonceS)
//	dialer -> server: HMAC(k_raft, "client", nonceC, nonceS)
//	then frames both ways: length(4) payload MAC(32) = HMAC(k_dir, seq(8) || payload)
const (
	raftNonce    = 16
	raftMACSize  = sha256.Size
	raftMaxFrame = 64 << 10
)

var errRaftAuth = errors.New("raft: connection not authenticated by the cluster secret")

func raftProof(key []byte, who string, nc, ns []byte) []byte {
	return mac(key, who, string(nc), string(ns))
}

// raftKeys derives the session keys of each direction.
func raftKeys(key, nc, ns []byte) (dialerToServer, serverToDialer []byte) {
	return mac(key, "c2s", string(nc), string(ns)), mac(key, "s2c", string(nc), string(ns))
}

// DialRaft opens a plain Raft connection to addr: the challenge-response, then framed
// traffic. Dialer.DialRaft opens one over TLS when the node has a certificate.
func (s *Secret) DialRaft(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return s.raftClient(c, timeout)
}

// raftClient runs the dialer's side of the challenge-response on c (closed on failure)
// and returns the framed connection.
func (s *Secret) raftClient(c net.Conn, timeout time.Duration) (net.Conn, error) {
	c.SetDeadline(time.Now().Add(timeout))
	nc := make([]byte, raftNonce)
	rand.Read(nc)
	if _, err := c.Write(append([]byte(raftMagic), nc...)); err != nil {
		c.Close()
		return nil, err
	}
	resp := make([]byte, raftNonce+raftMACSize)
	if _, err := io.ReadFull(c, resp); err != nil {
		c.Close()
		return nil, errRaftAuth
	}
	ns := resp[:raftNonce]
	if !hmac.Equal(resp[raftNonce:], raftProof(s.raft, "server", nc, ns)) {
		c.Close()
		return nil, errRaftAuth
	}
	if _, err := c.Write(raftProof(s.raft, "client", nc, ns)); err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	out, in := raftKeys(s.raft, nc, ns)
	return newFramedConn(c, c, out, in), nil
}

// acceptRaft runs the server side of the challenge-response on c, whose magic was read;
// r reads what follows it.
func (s *Secret) acceptRaft(c net.Conn, r io.Reader) (net.Conn, error) {
	nc := make([]byte, raftNonce)
	if _, err := io.ReadFull(r, nc); err != nil {
		return nil, errRaftAuth
	}
	ns := make([]byte, raftNonce)
	rand.Read(ns)
	if _, err := c.Write(append(append([]byte(nil), ns...), raftProof(s.raft, "server", nc, ns)...)); err != nil {
		return nil, err
	}
	proof := make([]byte, raftMACSize)
	if _, err := io.ReadFull(r, proof); err != nil || !hmac.Equal(proof, raftProof(s.raft, "client", nc, ns)) {
		return nil, errRaftAuth
	}
	in, out := raftKeys(s.raft, nc, ns)
	return newFramedConn(c, r, out, in), nil
}

// framedConn authenticates every frame it writes and reads.
type framedConn struct {
	net.Conn
	r io.Reader

	wmu  sync.Mutex
	wmac hash.Hash
	wseq uint64
	wbuf []byte

	rmac hash.Hash
	rseq uint64
	rbuf []byte // payload read and not yet returned
	rerr error
}

func newFramedConn(c net.Conn, r io.Reader, writeKey, readKey []byte) *framedConn {
	return &framedConn{Conn: c, r: r, wmac: hmac.New(sha256.New, writeKey), rmac: hmac.New(sha256.New, readKey)}
}

func (f *framedConn) Write(p []byte) (int, error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), raftMaxFrame)]
		f.wbuf = binary.BigEndian.AppendUint32(f.wbuf[:0], uint32(len(chunk)))
		f.wbuf = append(f.wbuf, chunk...)
		f.wmac.Reset()
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], f.wseq)
		f.wmac.Write(seq[:])
		f.wmac.Write(chunk)
		f.wbuf = f.wmac.Sum(f.wbuf)
		f.wseq++
		if _, err := f.Conn.Write(f.wbuf); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

func (f *framedConn) Read(p []byte) (int, error) {
	for len(f.rbuf) == 0 {
		if f.rerr != nil {
			return 0, f.rerr
		}
		f.rerr = f.readFrame()
	}
	n := copy(p, f.rbuf)
	f.rbuf = f.rbuf[n:]
	return n, nil
}

// readFrame reads and checks the next frame into rbuf. A frame that fails its check
// closes the connection.
func (f *framedConn) readFrame() error {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > raftMaxFrame {
		f.Conn.Close()
		return errRaftAuth
	}
	buf := make([]byte, int(n)+raftMACSize)
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return err
	}
	payload, sum := buf[:n], buf[n:]
	f.rmac.Reset()
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], f.rseq)
	f.rmac.Write(seq[:])
	f.rmac.Write(payload)
	if !hmac.Equal(sum, f.rmac.Sum(nil)) {
		f.Conn.Close()
		return errRaftAuth
	}
	f.rseq++
	f.rbuf = payload
	return nil
}
