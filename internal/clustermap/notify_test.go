package clustermap

import (
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// TestNotifyTargetCommands: targets are added, replaced and removed; bad ones are refused
// and change nothing.
func TestNotifyTargetCommands(t *testing.T) {
	m := &Map{Epoch: 1, Buckets: map[string]Bucket{}}
	put := func(tg NotifyTarget) (*Map, error) {
		return ApplyCommand(m, Command{Op: OpPutNotifyTarget, Target: &tg})
	}
	for _, bad := range []NotifyTarget{
		{Name: "", Webhook: "http://h/"},
		{Name: "a/b", Webhook: "http://h/"},
		{Name: "w", Webhook: "ftp://h/"},
		{Name: "w", Webhook: "http://h/", Redis: "h:1", List: "l"},
		{Name: "r", Redis: "h:1"},
		{Name: "r", Redis: "nohost", List: "l"},
		{Name: "r", Redis: "h:1", List: "l", Secret: "clear-text"},
	} {
		if _, err := put(bad); !errors.Is(errors.Invalid, err) {
			t.Errorf("%+v: %v, want Invalid", bad, err)
		}
	}
	var err error
	if m, err = put(NotifyTarget{Name: "hook", Webhook: "https://app.test/ev"}); err != nil {
		t.Fatal(err)
	}
	if m, err = put(NotifyTarget{Name: "jobs", Redis: "127.0.0.1:6379", List: "ev", Channel: "live", Secret: "v1.sealed"}); err != nil {
		t.Fatal(err)
	}
	if len(m.Targets) != 2 || m.Targets["jobs"].Channel != "live" {
		t.Fatalf("targets %+v", m.Targets)
	}
	c := m.Clone()
	if c.Targets["hook"] != m.Targets["hook"] {
		t.Fatal("Clone lost the targets")
	}
	if _, err := ApplyCommand(m, Command{Op: OpRemoveNotifyTarget, Name: "nosuch"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("remove unknown: %v", err)
	}
	m2, err := ApplyCommand(m, Command{Op: OpRemoveNotifyTarget, Name: "hook"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m2.Targets["hook"]; ok || len(m.Targets) != 2 {
		t.Fatalf("after remove: %+v (old map %+v)", m2.Targets, m.Targets)
	}
}
