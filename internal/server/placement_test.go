package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// A node bootstrapped with --placement v2 starts a map with placement version 2 at this
// build's feature level, and refuses the join of a node at level 12 (which would compute
// version 1's tables from that map); a node at this level may join.
func TestBootstrapPlacementV2(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Ready, 1)
	done := make(chan error, 1)
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeAddr: "127.0.0.1:0",
		AccessKey: "PLACEMENTTESTKEY0001", SecretKey: "placementTestSecret0123456789abcdefghij",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Internode: InternodeTLS{Off: true},
		Placement: 2, Ready: func(r Ready) { ready <- r }}
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var r Ready
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("node exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("node not ready in 60s")
	}
	secret, err := rpc.NewSecret(r.Secret)
	if err != nil {
		t.Fatal(err)
	}
	c := &rpc.Client{Secret: secret, Node: "tester", HTTP: &http.Client{}}
	var m clustermap.Map
	if err := c.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: r.NodeAddr, Path: wire.PathMap}, &m); err != nil {
		t.Fatal(err)
	}
	if m.PlacementVersion != 2 || m.Level != featureLevel || m.Level < clustermap.PlacementV2Level {
		t.Fatalf("bootstrap map: placement version %d, level %d", m.PlacementVersion, m.Level)
	}
	join := func(level string) error {
		body, _ := json.Marshal(clustermap.Node{ID: "joiner-" + level, Addr: "127.0.0.9:1" + level, Roles: []string{clustermap.RoleStorage}})
		var nm clustermap.Map
		return c.DoJSON(ctx, &rpc.Request{Method: http.MethodPost, Addr: r.NodeAddr, Path: wire.PathJoin,
			Query: url.Values{"level": {level}}, Body: bytes.NewReader(body), Size: int64(len(body))}, &nm)
	}
	if err := join("12"); err == nil {
		t.Fatal("a level-12 node joined a map with placement version 2")
	}
	if err := join("13"); err != nil {
		t.Fatalf("a level-13 node: %v", err)
	}
}
