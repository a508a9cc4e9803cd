package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// netSwitch is the multi-host test's switch: a learning Ethernet switch in user space
// that forwards frames between the switch namespace's links, holding each frame for the
// one-way delay set between the zones of its two ports. It stands in for a kernel bridge
// with tc netem on its ports, which this machine's kernel lacks (no sch_netem, no fq for
// departure-time pacing).
//
// Each port is an AF_PACKET socket bound to one link, with virtio-net headers
// (PACKET_VNET_HDR), so that the large segments veth passes (TSO/GSO) and their pending
// checksums go through whole and the kernel of the receiving side finishes them. A frame
// between two ports with a delay waits in that pair's queue, in order (the delay of a
// pair is the same for every frame, so a FIFO keeps deadlines in order).
type netSwitch struct {
	ports []*switchPort
	zone  []int // zone of each port; -1: no zone (the clients' port)

	mu   sync.Mutex
	macs map[[6]byte]int // learned: source address to port

	// delays[i*n+j] is the one-way delay of a frame from port i to port j, in ns.
	delays []atomic.Int64
	lines  map[[2]int]chan delayedFrame

	dropped atomic.Int64 // frames lost: a full delay line, or a failed write
	done    chan struct{}
}

type switchPort struct {
	name string
	fd   int
}

type delayedFrame struct {
	due   time.Time
	frame []byte
}

// vnetHdrLen is the size of struct virtio_net_hdr, which leads every frame read from
// and written to a socket with PACKET_VNET_HDR.
const vnetHdrLen = 10

// newNetSwitch opens a port on each of links in namespace ns; zone[i] is link i's zone.
// It forwards frames until close.
func newNetSwitch(ns string, links []string, zone []int) (*netSwitch, error) {
	s := &netSwitch{zone: zone, macs: map[[6]byte]int{}, delays: make([]atomic.Int64, len(links)*len(links)), lines: map[[2]int]chan delayedFrame{}, done: make(chan struct{})}
	err := inNetns(ns, func() error {
		for _, name := range links {
			ifi, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
			if err != nil {
				return fmt.Errorf("packet socket on %s: %w", name, err)
			}
			s.ports = append(s.ports, &switchPort{name: name, fd: fd})
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
				return fmt.Errorf("PACKET_VNET_HDR on %s: %w", name, err)
			}
			tv := unix.NsecToTimeval(int64(200 * time.Millisecond)) // receive wakes to see close
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
				return err
			}
			if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
				return fmt.Errorf("bind to %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		s.close()
		return nil, err
	}
	for i := range s.ports {
		for j := range s.ports {
			if i != j {
				line := make(chan delayedFrame, 4096)
				s.lines[[2]int{i, j}] = line
				go s.deliver(j, line)
			}
		}
	}
	for i := range s.ports {
		go s.receive(i)
	}
	return s, nil
}

// setDelays sets the one-way delay of frames between two ports of one zone (within) and
// of different zones (between). The clients' port has no delay to anything.
func (s *netSwitch) setDelays(within, between time.Duration) {
	n := len(s.ports)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			var d time.Duration
			switch {
			case s.zone[i] < 0 || s.zone[j] < 0:
			case s.zone[i] == s.zone[j]:
				d = within
			default:
				d = between
			}
			s.delays[i*n+j].Store(int64(d))
		}
	}
}

// receive forwards the frames arriving on port i until the switch closes.
func (s *netSwitch) receive(i int) {
	buf := make([]byte, vnetHdrLen+65536+64)
	for {
		n, from, err := unix.Recvfrom(s.ports[i].fd, buf, 0)
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if err == unix.EINTR || err == unix.ENETDOWN || err == unix.EAGAIN {
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // this switch's own write to the port
		}
		if n < vnetHdrLen+14 {
			continue
		}
		frame := buf[vnetHdrLen:n]
		var dst, src [6]byte
		copy(dst[:], frame[0:6])
		copy(src[:], frame[6:12])
		s.mu.Lock()
		s.macs[src] = i
		out, known := s.macs[dst]
		s.mu.Unlock()
		if known && out != i {
			s.forward(i, out, buf[:n])
		} else if !known {
			for j := range s.ports {
				if j != i {
					s.forward(i, j, buf[:n])
				}
			}
		}
	}
}

// forward sends a copy of frame (with its virtio-net header) from port i out of port j,
// now or after the pair's delay.
func (s *netSwitch) forward(i, j int, frame []byte) {
	d := time.Duration(s.delays[i*len(s.ports)+j].Load())
	if d == 0 {
		s.write(j, frame)
		return
	}
	select {
	case s.lines[[2]int{i, j}] <- delayedFrame{due: time.Now().Add(d), frame: append([]byte(nil), frame...)}:
	default:
		s.dropped.Add(1) // a queue longer than a link's buffer: lost, as on a wire
	}
}

// deliver writes the frames of one delay line out of port j when they are due, until the
// switch closes.
func (s *netSwitch) deliver(j int, line chan delayedFrame) {
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-s.done:
			return
		case f := <-line:
			if wait := time.Until(f.due); wait > 0 {
				timer.Reset(wait)
				select {
				case <-s.done:
					timer.Stop()
					return
				case <-timer.C:
				}
			}
			s.write(j, f.frame)
		}
	}
}

func (s *netSwitch) write(j int, frame []byte) {
	if _, err := unix.Write(s.ports[j].fd, frame); err != nil {
		s.dropped.Add(1) // the link is down (a cut) or its queue full
	}
}

func (s *netSwitch) close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	for _, p := range s.ports {
		unix.Close(p.fd)
	}
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

// inNetns runs fn on an OS thread moved into network namespace ns, then moves the thread
// back. Sockets made by fn stay in ns.
func inNetns(ns string, fn func() error) error {
	runtime.LockOSThread()
	home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer home.Close()
	f, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := fn()
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so nothing else runs in the wrong namespace; the
		// runtime ends it with the goroutine.
		return fmt.Errorf("setns back to the test's namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
