package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/s3api"
)

// accessLog writes the S3 access log (the audit log): one JSON object per request and
// line, to a file (appended, created 0600; Reopen opens the path again, for log rotation)
// or to standard output ("-"). Lines are buffered and written at least every second and
// at Close; a failing write is reported once in the node's log and counted.
type accessLog struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	f      *os.File // nil for standard output
	w      *bufio.Writer
	failed bool
}

func openAccessLog(path string, log *slog.Logger) (*accessLog, error) {
	l := &accessLog{path: path, log: log}
	if path == "-" {
		l.w = bufio.NewWriterSize(os.Stdout, 64<<10)
		return l, nil
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *accessLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return errors.E(errors.IO, err)
	}
	l.f, l.w = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// Record appends one request.
func (l *accessLog) Record(rec s3api.AccessRecord) {
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(line)
	if err := l.w.WriteByte('\n'); err != nil && !l.failed {
		l.failed = true
		l.log.Error("the access log cannot be written: records are lost until it is reopened (SIGHUP)", "file", l.path, "err", err)
	}
}

func (l *accessLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
}

// Reopen flushes what is buffered and opens the path again (after a rotation moved the
// file away).
func (l *accessLog) Reopen() error {
	if l.f == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
	old := l.f
	if err := l.open(); err != nil {
		l.w = bufio.NewWriterSize(old, 64<<10) // keep writing where it was
		return err
	}
	l.failed = false
	return old.Close()
}

// run writes what is buffered every second until ctx ends, and reopens the file at each
// receive from reopen.
func (l *accessLog) run(ctx context.Context, reopen <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.flush()
		case <-reopen:
			if err := l.Reopen(); err != nil {
				l.log.Error("could not reopen the access log; writing on to the file it had open", "file", l.path, "err", err)
			} else {
				l.log.Info("access log reopened", "file", l.path)
			}
		}
	}
}

// Close writes what is buffered and closes the file.
func (l *accessLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.w.Flush()
	if l.f != nil {
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

var _ io.Closer = (*accessLog)(nil)
