package policy

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

func matchKeyGlob(t testing.TB, pattern, key string) bool {
	t.Helper()
	g, err := compileGlob(pattern, globKey)
	if err != nil {
		t.Fatalf("compileGlob(%q): %v", pattern, err)
	}
	return g.matchKey(key, key[strings.LastIndexByte(key, '/')+1:])
}

func TestKeyGlob(t *testing.T) {
	tests := []struct {
		pattern, key string
		want         bool
	}{
		// A pattern without "/" matches the last path element.
		{"*.root", "x.root", true},
		{"*.root", "a/b/x.root", true},
		{"*.root", "a/b/x.root/y", false},
		{"*.root", "x.rootx", false},
		{"*.root", ".root", true},
		{"x.root", "a/x.root", true},
		{"x.root", "a/xx.root", false},
		{"data*", "a/data1", true},
		{"data*", "data/1", false}, // last element is "1"
		{"*abc*", "x/yabcz", true},
		{"*abc*", "abc/y", false},
		{"*", "a/b/c", true},
		{"*", "dir/", true}, // the last element is empty
		{"**", "a/b/c", true},
		{"", "dir/", true},
		{"", "dir", false},
		{"?", "a/b", true},
		{"?", "a/bc", false},
		{"??", "é1", true}, // ? is one character, not one byte
		{"?", "€", true},
		{"*?*?", "€", false},
		{"a*b*c", "a/aXbYc", true},
		{"a*b*c", "aXbYcd", false},
		{"a*b*c", "abcbc", true},
		{"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		// Character classes.
		{"[abc].txt", "b.txt", true},
		{"[abc].txt", "d.txt", false},
		{"[a-c][0-9].txt", "c7.txt", true},
		{"[a-c][0-9].txt", "C7.txt", false},
		{"[!a-c].txt", "d.txt", true},
		{"[!a-c].txt", "a.txt", false},
		{"[^a-c].txt", "d.txt", true},
		{"[]x]", "]", true},
		{"[!]x]", "]", false},
		{"[a-]", "-", true},
		{"[é]", "é", true},
		{`[\]]`, "]", true},
		// Escapes.
		{`\*.txt`, "*.txt", true},
		{`\*.txt`, "a.txt", false},
		{`a\?`, "a?", true},
		{`a\?`, "ab", false},
		{`\[x]`, "[x]", true},
		// A pattern with "/" matches the whole key; * and ? do not cross "/".
		{"logs/*.gz", "logs/a.gz", true},
		{"logs/*.gz", "logs/2024/a.gz", false},
		{"logs/*.gz", "x/logs/a.gz", false},
		{"logs/*", "logs/", true},
		{"logs/*", "logs", false},
		{"logs/?", "logs/a", true},
		{"logs/?", "logs//", false},
		{"*/*", "a/b", true},
		{"*/*", "a/b/c", false},
		{"a/b", "a/b", true},
		{"a/b", "a/bc", false},
		{"/a", "/a", true},
		{"/a", "a", false},
		{"a/", "a/", true},
		{"photos/20[0-9][0-9]/*/*.jpg", "photos/2024/06/x.jpg", true},
		{"photos/20[0-9][0-9]/*/*.jpg", "photos/1999/06/x.jpg", false},
		// "**" as a whole element.
		{"logs/**", "logs/a", true},
		{"logs/**", "logs/a/b/c", true},
		{"logs/**", "logs/", true},
		{"logs/**", "logs", false},
		{"logs/**", "logsx/a", false},
		{"logs/**/*.gz", "logs/a.gz", true},
		{"logs/**/*.gz", "logs/2024/01/a.gz", true},
		{"logs/**/*.gz", "logs/2024/01/a.gzip", false},
		{"logs/**/*.gz", "x/logs/a.gz", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a//b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/bb", false},
		{"a/**/b", "ab", false},
		{"**/tmp/*", "tmp/x", true},
		{"**/tmp/*", "a/b/tmp/x", true},
		{"**/tmp/*", "a/btmp/x", false},
		{"**/tmp/*", "a/tmp/x/y", false},
		{"**/b", "b", true},
		{"**/b", "/b", true},
		{"**/**", "", true},
		{"**/x/**/y/**", "a/x/b/c/y/d", true},
		{"**/x/**/y/**", "a/x/b/c/y", false},
		{"a/**/b/**/c", "a/b/b/c/c", true},
		{"a/**/**/b", "a/b", true},
	}
	for _, tt := range tests {
		if got := matchKeyGlob(t, tt.pattern, tt.key); got != tt.want {
			t.Errorf("key glob %q on %q: got %v, want %v", tt.pattern, tt.key, got, tt.want)
		}
	}
}

func TestTypeGlob(t *testing.T) {
	tests := []struct {
		pattern, mtype string
		want           bool
	}{
		{"image/*", "image/jpeg", true},
		{"image/*", "Image/JPEG", true},
		{"image/*", "video/mp4", false},
		{"image/*", "image/", true},
		{"IMAGE/*", "image/png", true},
		{"*", "application/octet-stream", true},
		{"*", "", true},
		{"*/json", "application/json", true},
		{"*json", "application/vnd.api+json", true},
		{"*/*+xml", "image/svg+xml", true},
		{"text/plain", "text/plain", true},
		{"text/plain", "text/plainx", false},
		{"text/?lain", "TEXT/PLAIN", true},
		{"*PLAIN*", "text/plain", true},
		{"[A-C]*", "audio/mp3", true},
		{"[a-c]*", "Audio/mp3", true},
		{"[!a]*", "Audio/mp3", false},
		{"application/x-*-archive", "application/x-tar-archive", true},
		{"application/**", "application/a/b", true}, // ** is * in types
	}
	for _, tt := range tests {
		g, err := compileGlob(tt.pattern, globType)
		if err != nil {
			t.Fatalf("compileGlob(%q): %v", tt.pattern, err)
		}
		if got := g.matchType(tt.mtype); got != tt.want {
			t.Errorf("type glob %q on %q: got %v, want %v", tt.pattern, tt.mtype, got, tt.want)
		}
	}
}

func TestGlobErrors(t *testing.T) {
	tests := []struct {
		pattern string
		mode    globMode
		want    string
	}{
		{"[abc", globKey, "not closed"},
		{"[", globKey, "not closed"},
		{"[]", globKey, "not closed"},
		{`[a\`, globKey, "not closed"},
		{"[z-a]", globKey, "backwards"},
		{`abc\`, globKey, "lone backslash"},
		{"a**b", globKey, "whole path element"},
		{"logs/**.gz", globKey, "whole path element"},
		{"***x", globKey, "whole path element"},
		{"[a/]", globKey, `includes "/"`},
		{"[.-0]", globKey, `includes "/"`},
		{"[z-a]", globType, "backwards"},
	}
	for _, tt := range tests {
		_, err := compileGlob(tt.pattern, tt.mode)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("compileGlob(%q): got %v, want an error containing %q", tt.pattern, err, tt.want)
		}
	}
}

// globPieces are the building blocks of random patterns; refPieces are their
// translations to regular expressions within one path element.
var globPieces = []string{"a", "b", "ab", ".", "é", "/", "*", "?", "[ab]", "[!a]", "[a-b]", `\*`, `\?`}

var refPieces = map[string]string{
	"a": "a", "b": "b", "ab": "ab", ".": `\.`, "é": "é",
	"*": "[^/]*", "?": "[^/]", "[ab]": "[ab]", "[!a]": "[^a/]", "[a-b]": "[a-b]",
	`\*`: `\*`, `\?`: `\?`,
}

// refGlob translates a pattern made of globPieces into an anchored regular
// expression, independently of the matcher: the reference semantics are
// "without /, match the last element; ** as an element is (.*/)? in front of
// an element, and .* at the end". ok is false if the pattern is invalid.
func refGlob(pieces []string) (re *regexp.Regexp, base, ok bool) {
	// Merge runs of stars as the text would read them.
	var ps []string
	for _, p := range pieces {
		if p == "*" && len(ps) > 0 && (ps[len(ps)-1] == "*" || ps[len(ps)-1] == "**") {
			ps[len(ps)-1] = "**"
			continue
		}
		ps = append(ps, p)
	}
	var segs [][]string
	cur := []string{}
	for _, p := range ps {
		if p == "/" {
			segs = append(segs, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, p)
	}
	segs = append(segs, cur)
	var b strings.Builder
	b.WriteString("(?s)^")
	for i, seg := range segs {
		last := i == len(segs)-1
		if len(seg) == 1 && seg[0] == "**" {
			if last {
				b.WriteString(".*")
			} else {
				b.WriteString("(?:.*/)?")
			}
			continue
		}
		for _, p := range seg {
			if p == "**" {
				return nil, false, false
			}
			b.WriteString(refPieces[p])
		}
		if !last {
			b.WriteString("/")
		}
	}
	b.WriteString("$")
	base = len(segs) == 1
	if base && len(segs[0]) == 1 && segs[0][0] == "**" {
		return regexp.MustCompile("^[^/]*$"), true, true
	}
	return regexp.MustCompile(b.String()), base, true
}

var keyRunes = []string{"a", "b", "/", ".", "é", "*", "?", "x"}

// TestGlobMatchesReference compares the compiled matcher, fast paths and all,
// with a regular-expression translation on random patterns and keys.
func TestGlobMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() || raceEnabled {
		n = 4000
	}
	for range n {
		var pieces []string
		for range rng.IntN(7) {
			pieces = append(pieces, globPieces[rng.IntN(len(globPieces))])
		}
		pattern := strings.Join(pieces, "")
		ref, base, ok := refGlob(pieces)
		g, err := compileGlob(pattern, globKey)
		if ok != (err == nil) {
			t.Fatalf("pattern %q: compile error %v, reference valid %v", pattern, err, ok)
		}
		if !ok {
			continue
		}
		for range 20 {
			var kb strings.Builder
			for range rng.IntN(9) {
				kb.WriteString(keyRunes[rng.IntN(len(keyRunes))])
			}
			key := kb.String()
			b := key[strings.LastIndexByte(key, '/')+1:]
			subject := key
			if base {
				subject = b
			}
			if got, want := g.matchKey(key, b), ref.MatchString(subject); got != want {
				t.Fatalf("pattern %q (reference %s) on key %q: got %v, want %v", pattern, ref, key, got, want)
			}
		}
	}
}

// FuzzGlob checks the matcher against the reference on fuzzed choices of pieces.
func FuzzGlob(f *testing.F) {
	f.Add([]byte{0, 6, 5, 1}, "a/b.a")
	f.Add([]byte{6, 6, 5, 6, 6, 5, 0}, "x/y/a")
	f.Add([]byte{4, 7, 8}, "é?ab")
	f.Fuzz(func(t *testing.T, choice []byte, key string) {
		if len(choice) > 12 {
			choice = choice[:12]
		}
		var pieces []string
		for _, c := range choice {
			pieces = append(pieces, globPieces[int(c)%len(globPieces)])
		}
		pattern := strings.Join(pieces, "")
		ref, base, ok := refGlob(pieces)
		g, err := compileGlob(pattern, globKey)
		if ok != (err == nil) {
			t.Fatalf("pattern %q: compile error %v, reference valid %v", pattern, err, ok)
		}
		if !ok {
			return
		}
		b := key[strings.LastIndexByte(key, '/')+1:]
		subject := key
		if base {
			subject = b
		}
		if got, want := g.matchKey(key, b), ref.MatchString(subject); got != want {
			t.Fatalf("pattern %q (reference %s) on key %q: got %v, want %v", pattern, ref, key, got, want)
		}
	})
}
