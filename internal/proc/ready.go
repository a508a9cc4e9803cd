// Package proc starts and supervises `cairn server` processes for the process-level
// tests, the tools (soak, benchmarks) and `cairn dev cluster`.
//
// A process is ready when the ready file it was told to write (`cairn server
// --ready-file`) exists: no line of its output is parsed. Its first start binds port 0
// on loopback (the kernel picks a free port, so nothing can take it between a probe and
// the bind), and the ready file reports the ports it got; a restart binds the same
// addresses again, so a cluster member keeps its node address. The process's stdout and
// stderr go to a log file. Until polls a condition with a deadline, instead of a sleep.
//
// It is not a process manager for production: no supervision tree, no log rotation.
// Package proctest (internal/testutil/proctest) wraps it for tests.
package proc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Ready is the content of the ready file `cairn server --ready-file` writes, as JSON,
// once the node serves on all its listeners.
type Ready struct {
	PID int `json:"pid"`
	// S3, Admin and Node are the addresses the listeners are bound to (with the port the
	// kernel chose for a listener given port 0). Admin is "" when it is off. Node is the
	// internode address the node advertises to the cluster.
	S3    string `json:"s3"`
	Admin string `json:"admin"`
	Node  string `json:"node"`
	// NBD is the NBD listener's address ("": off).
	NBD string `json:"nbd,omitempty"`
	// TLS says the S3 and admin listeners serve HTTPS (cairn server --tls-cert).
	TLS     bool   `json:"tls,omitempty"`
	NodeID  string `json:"node_id"`
	DataDir string `json:"data_dir"`
	Version string `json:"version"`
}

// WriteReadyFile writes r to path atomically: a reader sees no file or all of it.
func WriteReadyFile(path string, r Ready) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	_, err = tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// ReadReadyFile reads a ready file; the error wraps fs.ErrNotExist if there is none yet.
func ReadReadyFile(path string) (Ready, error) {
	var r Ready
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("ready file %s: %w", path, err)
	}
	return r, nil
}
