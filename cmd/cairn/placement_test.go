package main

import (
	"io"
	"strings"
	"testing"
)

// cairn admin placement-version refuses to move data without --yes, and unknown versions.
func TestPlacementVersionNeedsYes(t *testing.T) {
	c := &adminClient{}
	for _, args := range [][]string{{"v2"}, {"v2", "--force"}, {"v3", "--yes"}, {}, {"v1", "--yes", "x"}} {
		err := c.placementVersionCmd(io.Discard, args)
		if err == nil {
			t.Fatalf("%v: accepted", args)
		}
		if len(args) >= 1 && args[0] == "v2" && !strings.Contains(err.Error(), "data moves") {
			t.Errorf("%v: %v does not warn that data moves", args, err)
		}
	}
}
