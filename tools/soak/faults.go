package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// faults injects kill -9 / restart, SIGSTOP / SIGCONT and disk-full faults on random
// nodes, at most cfg.maxFaulty nodes at a time, and restarts nodes that exit on their own.
type faults struct {
	cfg *config
	cl  *cluster
	log *logger

	wg      sync.WaitGroup
	mu      sync.Mutex
	active  map[int]string // node index -> the fault it is under
	counts  map[string]int
	exits   []string // nodes that exited on their own
	noStart []string // nodes that could not be restarted
	// stopping: the fault loop is over, no more restarts are started from exited (heal
	// restarts what is down).
	stopping bool
}

func newFaults(cfg *config, cl *cluster, lg *logger) *faults {
	f := &faults{cfg: cfg, cl: cl, log: lg, active: map[int]string{}, counts: map[string]int{}}
	cl.onExit = f.exited
	return f
}

// pickGateway draws a node for a client request: one request in five goes to any node
// (a killed one refuses the connection, a paused one holds the request until it resumes),
// the others to a node that serves (not killed or paused; a full disk still serves).
func (f *faults) pickGateway(r *rand.Rand) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.IntN(5) == 0 {
		return r.IntN(len(f.cl.nodes))
	}
	var ok []int
	for i := range f.cl.nodes {
		switch f.active[i] {
		case "kill", "pause", "exit":
		default:
			ok = append(ok, i)
		}
	}
	x := r.IntN(len(f.cl.nodes))
	if len(ok) == 0 {
		return x
	}
	return ok[x%len(ok)]
}

// run injects faults until ctx is done, then waits for the faults in progress to be healed.
func (f *faults) run(ctx context.Context) {
	r := rand.New(rand.NewPCG(f.cfg.seed, 0))
	defer func() {
		f.mu.Lock()
		f.stopping = true
		f.mu.Unlock()
		f.wg.Wait()
	}()
	free := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.active) < f.cfg.maxFaulty
	}
	for {
		// 1-4 s after a slot is free (at most maxFaulty nodes faulty at once), strike.
		for !free() {
			sleep(ctx, 100*time.Millisecond)
			if ctx.Err() != nil {
				return
			}
		}
		sleep(ctx, time.Second+time.Duration(r.IntN(3000))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		if len(f.cfg.faults) == 0 {
			continue
		}
		kind := f.cfg.faults[r.IntN(len(f.cfg.faults))]
		hold := time.Second + time.Duration(r.IntN(4000))*time.Millisecond // kill, pause: 1-5 s
		if kind == "diskfull" {
			hold += time.Second // 2-6 s
		}
		pick := r.IntN(len(f.cl.nodes))
		var v int // a node that is not faulty (a node that exited on its own may have taken the slot)
		for {
			f.mu.Lock()
			var healthy []int
			for i := range f.cl.nodes {
				if f.active[i] == "" {
					healthy = append(healthy, i)
				}
			}
			if len(f.active) < f.cfg.maxFaulty && len(healthy) > 0 {
				v = healthy[pick%len(healthy)]
				f.active[v] = kind
				f.counts[kind]++
				f.mu.Unlock()
				break
			}
			f.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.inject(ctx, f.cl.nodes[v], kind, hold)
		}()
	}
}

// sleep waits d, or less if ctx is done (the soak is over: heal at once).
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (f *faults) inject(ctx context.Context, n *node, kind string, hold time.Duration) {
	switch kind {
	case "kill":
		f.log.printf("fault: kill -9 %s (restart in %.1fs)", n.id, hold.Seconds())
		n.kill()
		sleep(ctx, hold)
	case "pause":
		f.log.printf("fault: SIGSTOP %s (SIGCONT in %.1fs)", n.id, hold.Seconds())
		n.pause()
		sleep(ctx, hold)
		n.resume()
		f.log.printf("heal: SIGCONT %s", n.id)
	case "diskfull":
		t0 := time.Now()
		wrote, err := n.fill()
		if err != nil {
			f.log.printf("fault: disk-full %s: filler failed after %d MiB: %v", n.id, wrote>>20, err)
		} else {
			f.log.printf("fault: disk-full %s (filler of %d MiB written in %.1fs, removed in %.1fs)", n.id, wrote>>20, time.Since(t0).Seconds(), hold.Seconds())
		}
		sleep(ctx, hold)
		if err := n.unfill(); err != nil {
			f.log.printf("heal: cannot remove the filler of %s: %v", n.id, err)
		} else {
			f.log.printf("heal: removed the filler of %s", n.id)
		}
	}
	f.restart(n)
	f.mu.Lock()
	delete(f.active, n.idx)
	f.mu.Unlock()
}

// restart starts n again if its process is gone, trying a few times.
func (f *faults) restart(n *node) {
	if n.running() {
		return
	}
	var err error
	for try := 1; try <= 5; try++ {
		t0 := time.Now()
		if err = n.start(context.Background()); err == nil {
			f.log.printf("heal: restarted %s (serving after %.1fs)", n.id, time.Since(t0).Seconds())
			f.mu.Lock()
			f.counts["restart"]++
			f.mu.Unlock()
			return
		}
		f.log.printf("heal: restart %d of %s failed: %v", try, n.id, err)
		time.Sleep(2 * time.Second)
	}
	f.mu.Lock()
	f.noStart = append(f.noStart, fmt.Sprintf("%s could not be restarted: %v", n.id, err))
	f.mu.Unlock()
}

// exited is called when a node's process exits without being told to: it is recorded,
// and the node is restarted (at once, or when the fault it is under ends).
func (f *faults) exited(n *node, err error) {
	f.mu.Lock()
	during := f.active[n.idx]
	msg := fmt.Sprintf("%s exited on its own at %s (%v)", n.id, time.Now().Format("15:04:05.000"), err)
	if during != "" {
		msg += " during a " + during + " fault"
	}
	f.exits = append(f.exits, msg+"; log tail:\n"+n.logTail(25))
	f.counts["unexpected exit"]++
	handled := during != "" || f.stopping
	if !handled {
		f.active[n.idx] = "exit"
		f.wg.Add(1) // under mu: before run's Wait, which follows stopping = true
	}
	f.mu.Unlock()
	f.log.printf("%s; log: %s", msg, n.logPath)
	if handled {
		return // the fault's end, or the final healing, restarts it
	}
	go func() {
		defer f.wg.Done()
		time.Sleep(time.Second)
		f.restart(n)
		f.mu.Lock()
		delete(f.active, n.idx)
		f.mu.Unlock()
	}()
}

// heal ends every fault: resumes paused nodes, removes fillers, restarts nodes that are
// down. Call it after run has returned.
func (f *faults) heal() {
	var wg sync.WaitGroup
	for _, n := range f.cl.nodes {
		n.resume()
		if n.mnt != "" {
			n.unfill()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.restart(n)
		}()
	}
	wg.Wait()
}
