package main

import (
	"flag"
	"strings"
)

// hoistFlags moves the flags fs defines to the front of args, wherever they are, so that
// `cairn admin status --json` means what `cairn admin --json status` does. Other
// arguments keep their order (a subcommand's own flags among them); a flag's value
// moves with it; nothing after "--" moves.
func hoistFlags(fs *flag.FlagSet, args []string) []string {
	var front, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if !strings.HasPrefix(a, "-") || a == "-" || name == "" || f == nil {
			rest = append(rest, a)
			continue
		}
		front = append(front, a)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); (!ok || !b.IsBoolFlag()) && !hasValue && i+1 < len(args) {
			i++
			front = append(front, args[i])
		}
	}
	return append(front, rest...)
}
