package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// devActions are the commands `cairn dev cluster ACTION NODE` sends to a running dev
// cluster over its control socket, DIR/control.sock.
var devActions = map[string]bool{"kill": true, "stop": true, "start": true, "restart": true}

// devSupervisor is a running dev cluster: its nodes, and the control socket's actions on
// them.
type devSupervisor struct {
	dir            string
	stdout, stderr io.Writer
	ctx            context.Context // ends on Ctrl-C

	mu    sync.Mutex // serializes actions and the writes of cluster.json
	c     *devCluster
	procs []*proc.Proc
}

// died reports a node that exited without being told to, unless the whole cluster is
// stopping (a Ctrl-C in a terminal reaches the nodes too, at the same time).
func (d *devSupervisor) died(p *proc.Proc, err error) {
	select {
	case <-d.ctx.Done():
		return
	case <-time.After(time.Second):
	}
	fmt.Fprintf(d.stderr, "cairn dev cluster: %s died (%v); log %s; start it again with: cairn dev cluster start %s --dir %s\n",
		p.Name(), err, p.LogPath(), p.Name(), d.dir)
}

// stopAll stops every node, those started again by the control commands included.
func (d *devSupervisor) stopAll() {
	d.mu.Lock()
	procs := d.procs
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			if !p.Running() {
				return
			}
			if err := p.Stop(); errors.Is(err, proc.ErrStopTimeout) {
				fmt.Fprintf(d.stderr, "cairn dev cluster: %v\n", err)
			} else if err := p.ExitErr(); err != nil && d.ctx.Err() == nil {
				fmt.Fprintf(d.stderr, "cairn dev cluster: %s: %v (log: %s)\n", p.Name(), err, p.LogPath())
			}
		})
	}
	wg.Wait()
}

// serve answers the control socket: one command a connection, "ACTION NODE\n", answered
// by one line starting "ok " or "error ".
func (d *devSupervisor) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Minute))
			line, err := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
			if err != nil {
				return
			}
			action, node, _ := strings.Cut(strings.TrimSpace(line), " ")
			msg, err := d.act(action, node)
			if err != nil {
				fmt.Fprintf(conn, "error %v\n", err)
				return
			}
			fmt.Fprintf(conn, "ok %s\n", msg)
		}()
	}
}

// act runs one control command.
func (d *devSupervisor) act(action, node string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var p *proc.Proc
	var idx int
	for i, q := range d.procs {
		if q.Name() == node || q.NodeID() == node {
			p, idx = q, i
		}
	}
	if p == nil || !devActions[action] {
		return "", fmt.Errorf("unknown node %q or action %q", node, action)
	}
	switch action {
	case "kill":
		if !p.Running() {
			return "", fmt.Errorf("%s is not running", p.Name())
		}
		p.Kill()
		return p.Name() + " killed", nil
	case "stop":
		if !p.Running() {
			return "", fmt.Errorf("%s is not running", p.Name())
		}
		if err := p.Stop(); err != nil && !errors.Is(err, proc.ErrStopTimeout) {
			return "", err
		}
		return p.Name() + " stopped", nil
	case "start":
		if p.Running() {
			return "", fmt.Errorf("%s is running", p.Name())
		}
	case "restart":
		if p.Running() {
			if err := p.Stop(); err != nil && !errors.Is(err, proc.ErrStopTimeout) {
				return "", err
			}
		}
	}
	if err := p.Restart(d.ctx); err != nil {
		return "", err
	}
	d.c.Nodes[idx].PID = p.PID()
	if data, err := json.MarshalIndent(d.c, "", "  "); err == nil {
		os.WriteFile(filepath.Join(d.dir, "cluster.json"), data, 0o600)
	}
	fmt.Fprintf(d.stdout, "cairn dev cluster: %s started again (pid %d)\n", p.Name(), p.PID())
	return fmt.Sprintf("%s serves again: S3 %s, pid %d", p.Name(), p.URL(), p.PID()), nil
}

// listenControl listens on the control socket at path, readable and writable by this
// user only (whoever can connect can kill the nodes). A socket left by a dev cluster that
// died is replaced; one that answers belongs to a dev cluster still running.
func listenControl(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("dev: a dev cluster already runs in %s", filepath.Dir(path))
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("dev: the control socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("dev: the control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("dev: the control socket: %w", err)
	}
	return ln, nil
}

// devControl sends one command to the dev cluster running in --dir (or $CAIRN_DEV_DIR).
func devControl(action string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn dev cluster "+action, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", os.Getenv("CAIRN_DEV_DIR"), "the dev cluster's directory (as it printed when it started)")
	if err := fs.Parse(hoistFlags(fs, args)); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("dev: usage: cairn dev cluster %s NODE --dir DIR", action)
	}
	if *dir == "" {
		return fmt.Errorf("dev: which cluster? give --dir DIR (printed when it started) or set CAIRN_DEV_DIR")
	}
	conn, err := net.DialTimeout("unix", filepath.Join(*dir, "control.sock"), 5*time.Second)
	if err != nil {
		return fmt.Errorf("dev: no dev cluster runs in %s: %w", *dir, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Minute))
	fmt.Fprintf(conn, "%s %s\n", action, fs.Arg(0))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("dev: no answer from the dev cluster: %w", err)
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "ok "); ok {
		fmt.Fprintln(stdout, msg)
		return nil
	}
	return fmt.Errorf("dev: %s", strings.TrimPrefix(line, "error "))
}

// ephemeralStart is the first port of the kernel's ephemeral range (32768 if unknown).
func ephemeralStart() int {
	lo := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(data), &lo)
	}
	return lo
}
