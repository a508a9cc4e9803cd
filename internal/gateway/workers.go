package gateway

import (
	"sync"
	"time"
)

// workers runs replica writes on goroutines that outlive one write. A goroutine started
// for each write grew its stack through the store (or the internode client) every time;
// a worker's stack stays grown between writes.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only into an idle worker
	once  sync.Once
}

// workerIdle is how long a worker waits for its next write before it exits.
const workerIdle = 10 * time.Second

// run runs f on an idle worker, or on a new one if every worker is busy: it never waits
// for a worker.
func (w *workers) run(f func()) {
	w.once.Do(func() { w.tasks = make(chan func()) })
	select {
	case w.tasks <- f:
	default:
		go w.loop(f)
	}
}

// loop runs f, then the writes handed to it, until it has been idle for workerIdle.
func (w *workers) loop(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-w.tasks:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		}
	}
}
