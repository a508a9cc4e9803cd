package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return p
}

type check struct {
	obj   Object
	class string
	rule  int
}

func obj(key string, size int64, ctype string) Object {
	return Object{Key: key, Size: size, ContentType: ctype}
}

const briefExample = `# photos platform
default STANDARD                     # bucket default when no rule matches
*.root => EC42                        # a bare glob is shorthand for: key "*.root"
size < 64KiB => STANDARD stop
key ~ "^logs/[0-9]{4}/.*\.gz$" and size >= 1MiB => EC83
type "image/*" or key "*.jpg" => EC42 continue
not (size <= 1GiB) => EC83
`

var evalTests = []struct {
	name   string
	src    string
	checks []check
}{
	{"empty", "", []check{
		{obj("a", 1, ""), "", -1},
	}},
	{"comments and blank lines only", "# nothing\n\n   \t# still nothing\n", []check{
		{obj("a", 1, ""), "", -1},
	}},
	{"default only", "default STANDARD\n", []check{
		{obj("a", 1, ""), "STANDARD", -1},
		{obj("", -1, ""), "STANDARD", -1},
	}},
	{"bare glob", "*.root => EC42", []check{
		{obj("a/b/run1.root", 1, ""), "EC42", 0},
		{obj("run1.root", 1, ""), "EC42", 0},
		{obj("a/b.txt", 1, ""), "", -1},
	}},
	{"brief example", briefExample, []check{
		{obj("x/data.root", 10, ""), "EC42", 0},
		{obj("small.txt", 100, ""), "STANDARD", 1},
		{obj("logs/2024/app.gz", 2*mib, ""), "EC83", 2},
		{obj("logs/24/app.gz", 2*mib, ""), "STANDARD", -1},
		{obj("logs/2024/app.gz", 100*kib, ""), "STANDARD", -1},
		{obj("p/cat.jpg", 5*mib, ""), "EC42", 3},
		{obj("p/cat.png", 5*mib, "image/png"), "EC42", 3},
		{obj("p/cat.jpg", 2*gib, ""), "EC83", 4},
		{obj("p/cat.jpg", 10, "image/jpeg"), "STANDARD", 1},
		{obj("big.bin", 2*gib, ""), "EC83", 4},
		{obj("big.bin", -1, ""), "STANDARD", -1}, // every size test is unknown
		{obj("big.jpg", -1, ""), "EC42", 3},
	}},
	{"byte order mark", "\ufeff*.a => A", []check{
		{obj("x.a", 1, ""), "A", 0},
	}},
	{"default after the rules", "*.a => A\ndefault D\n", []check{
		{obj("x.a", 1, ""), "A", 0},
		{obj("x.b", 1, ""), "D", -1},
	}},
	{"key globs", `logs/**/*.gz => A
"tmp/*" => B
key photos/20[0-9][0-9]/* => C
key "*.[jJ][pP][gG]" => D
key a\ b => E
key "x\"y" => F
`, []check{
		{obj("logs/2024/01/a.gz", 1, ""), "A", 0},
		{obj("logs/a.gz", 1, ""), "A", 0},
		{obj("tmp/x", 1, ""), "B", 1},
		{obj("tmp/x/y", 1, ""), "", -1},
		{obj("photos/2024/x", 1, ""), "C", 2},
		{obj("photos/1999/x", 1, ""), "", -1},
		{obj("a/b/c.JPG", 1, ""), "D", 3},
		{obj("a/b/c.Jpg", 1, ""), "D", 3},
		{obj("a b", 1, ""), "E", 4},
		{obj(`x"y`, 1, ""), "F", 5},
	}},
	{"key regexes", `key ~ "^logs/[0-9]{4}/.*\.gz$" => A
key ~ "tmp" => B
key ~ "(?i)\.jpe?g$" => C
key ~ "a\"b" => D
key ~ "\\\\" => E
`, []check{
		{obj("logs/2024/x/y.gz", 1, ""), "A", 0},
		{obj("logs/202/x.gz", 1, ""), "", -1},
		{obj("a/tmp/b", 1, ""), "B", 1},    // not anchored
		{obj("x/y.JPEG", 1, ""), "C", 2},   // case-insensitive flag
		{obj(`a"b`, 1, ""), "D", 3},        // escaped quote
		{obj(`back\slash`, 1, ""), "E", 4}, // the regex \\ is one backslash
	}},
	{"content types", `type "image/*" => IMG
type application/json => JSON
type "*/*+xml" => XML
type "" => NONE
`, []check{
		{obj("a", 1, "image/png"), "IMG", 0},
		{obj("a", 1, "IMAGE/PNG; q=1"), "IMG", 0},
		{obj("a", 1, "  image/png  "), "IMG", 0},
		{obj("a", 1, "application/json; charset=utf-8"), "JSON", 1},
		{obj("a", 1, "application/jsonx"), "", -1},
		{obj("a", 1, "image/svg+xml"), "IMG", 0},
		{obj("a", 1, "application/rss+xml"), "XML", 2},
		{obj("a", 1, ""), "NONE", 3},
		{obj("a", 1, "text/plain"), "", -1},
	}},
	{"precedence: and binds tighter than or", "*.a or *.b and size > 10 => X", []check{
		{obj("x.a", 0, ""), "X", 0},
		{obj("x.b", 0, ""), "", -1},
		{obj("x.b", 11, ""), "X", 0},
	}},
	{"parentheses", "(*.a or *.b) and size > 10 => X", []check{
		{obj("x.a", 0, ""), "", -1},
		{obj("x.a", 11, ""), "X", 0},
		{obj("x.b", 11, ""), "X", 0},
		{obj("x.c", 11, ""), "", -1},
	}},
	{"not binds tighter than and", "not *.a and x* => X", []check{
		{obj("x.b", 0, ""), "X", 0},
		{obj("x.a", 0, ""), "", -1},
		{obj("y.b", 0, ""), "", -1},
	}},
	{"not of a group", "not (*.a or *.b) => X", []check{
		{obj("x.c", 0, ""), "X", 0},
		{obj("x.a", 0, ""), "", -1},
		{obj("x.b", 0, ""), "", -1},
	}},
	{"double not", "not not *.a => X", []check{
		{obj("x.a", 0, ""), "X", 0},
		{obj("x.b", 0, ""), "", -1},
	}},
	{"mixed", "a* and not *z or b* => X", []check{
		{obj("ab", 0, ""), "X", 0},
		{obj("az", 0, ""), "", -1},
		{obj("bz", 0, ""), "X", 0},
	}},
	{"keywords without spaces", `not(*.a)and(size<1KiB)or key"*.b"=>X`, []check{
		{obj("x.c", 10, ""), "X", 0},
		{obj("x.c", kib, ""), "", -1},
		{obj("x.b", kib, ""), "X", 0},
	}},
	{"stop is the default action", "*.a => A\n*.a => B\n", []check{
		{obj("x.a", 0, ""), "A", 0},
	}},
	{"explicit stop", "*.a => A stop\n*.a => B\n", []check{
		{obj("x.a", 0, ""), "A", 0},
	}},
	{"continue: a later match overrides", "*.a => A continue\nx* => B\n*.c => C\ndefault D", []check{
		{obj("x.a", 0, ""), "B", 1},
		{obj("y.a", 0, ""), "A", 0}, // no later match: the continue rule's class, not the default
		{obj("x.c", 0, ""), "B", 1},
		{obj("y.c", 0, ""), "C", 2},
		{obj("y.d", 0, ""), "D", -1},
	}},
	{"continue chain", "* => A continue\nsize > 10 => B continue\nsize > 100 => C continue\n", []check{
		{obj("x", 0, ""), "A", 0},
		{obj("x", 11, ""), "B", 1},
		{obj("x", 101, ""), "C", 2},
	}},
	{"unknown size: comparisons do not match, negated or not", "not size < 1KiB => A\nsize >= 1KiB => B\nsize in 0..1TiB => C\nsize != 5 => D\ndefault Z", []check{
		{obj("x", -1, ""), "Z", -1},
		{obj("x", 2*kib, ""), "A", 0},
		{obj("x", 5, ""), "C", 2},
	}},
	{"unknown size: three-valued and/or", `size < 1KiB and *.b => B
not (size < 1KiB or *.d) => D
size unknown => U
`, []check{
		{obj("x.b", -1, ""), "U", 2}, // unknown and true = unknown
		{obj("x.c", -1, ""), "U", 2}, // not (unknown or false) = unknown
		{obj("x.b", 10, ""), "B", 0},
		{obj("x.c", 2000, ""), "D", 1},
	}},
	{"size unknown", "size unknown or size > 1GiB => EC83\n", []check{
		{obj("x", -1, ""), "EC83", 0},
		{obj("x", gib+1, ""), "EC83", 0},
		{obj("x", 0, ""), "", -1},
	}},
}

// sizeTests are conditions on sizes with the sizes they hold for and not.
var sizeTests = []struct {
	cond      string
	yes, no   []int64
	canonical string // String's spelling of the condition, if not cond
}{
	{"size < 4096", []int64{0, 4095}, []int64{4096, 4097}, ""},
	{"size < 1B", []int64{0}, []int64{1}, ""},
	{"size < 1KB", []int64{999}, []int64{1000}, ""},
	{"size < 1KiB", []int64{1023}, []int64{1024}, ""},
	{"size < 1MB", []int64{999_999}, []int64{1_000_000}, ""},
	{"size < 1MiB", []int64{mib - 1}, []int64{mib}, ""},
	{"size < 1GB", []int64{999_999_999}, []int64{1_000_000_000}, ""},
	{"size < 1GiB", []int64{gib - 1}, []int64{gib}, ""},
	{"size < 1TB", []int64{999_999_999_999}, []int64{1_000_000_000_000}, ""},
	{"size < 1TiB", []int64{1<<40 - 1}, []int64{1 << 40}, ""},
	{"size < 8388607TiB", []int64{8388607<<40 - 1}, []int64{8388607 << 40, 1<<63 - 1}, ""},
	{"size < 64kib", []int64{64*kib - 1}, []int64{64 * kib}, "size < 64KiB"},
	{"size < 64 KiB", []int64{64*kib - 1}, []int64{64 * kib}, "size < 64KiB"},
	{"size < 1.5KiB", []int64{1535}, []int64{1536}, ""},
	{"size < 0.5KB", []int64{499}, []int64{500}, ""},
	{"size < 1.25MiB", []int64{1310719}, []int64{1310720}, ""},
	{"size < 2.50GB", []int64{2_499_999_999}, []int64{2_500_000_000}, "size < 2.5GB"},
	{"size < 0.000001MB", []int64{0}, []int64{1}, "size < 0.000001MB"},
	{"size<=1KiB", []int64{1023, 1024}, []int64{1025}, "size <= 1KiB"},
	{"size > 1KiB", []int64{1025}, []int64{1023, 1024}, ""},
	{"size >= 1KiB", []int64{1024, 1025}, []int64{0, 1023}, ""},
	{"size = 1KiB", []int64{1024}, []int64{1023, 1025}, ""},
	{"size == 1KiB", []int64{1024}, []int64{1023, 1025}, "size = 1KiB"},
	{"size != 1KiB", []int64{0, 1023, 1025}, []int64{1024}, ""},
	{"size = 0", []int64{0}, []int64{1}, ""},
	{"size in 1KiB..2KiB", []int64{1024, 2047}, []int64{0, 1023, 2048}, ""},
	{"size in 1KiB .. 2 KiB", []int64{1024, 2047}, []int64{1023, 2048}, "size in 1KiB..2KiB"},
	{"size in 0..1", []int64{0}, []int64{1}, ""},
	{"size in 1..1.5KB", []int64{1, 1499}, []int64{0, 1500}, ""},
}

func TestEvaluate(t *testing.T) {
	for _, tt := range evalTests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.src)
			for _, c := range tt.checks {
				class, rule := p.Evaluate(c.obj)
				if class != c.class || rule != c.rule {
					t.Errorf("Evaluate(%+v) = %q, %d; want %q, %d", c.obj, class, rule, c.class, c.rule)
				}
			}
			// The canonical form decides the same way.
			q := mustParse(t, p.String())
			for _, c := range tt.checks {
				if class, rule := q.Evaluate(c.obj); class != c.class || rule != c.rule {
					t.Errorf("canonical form %q: Evaluate(%+v) = %q, %d; want %q, %d", p.String(), c.obj, class, rule, c.class, c.rule)
				}
			}
		})
	}
}

// unknownSizeTests are conditions evaluated on an object of unknown size:
// key "x.a", content type "image/png".
var unknownSizeTests = []struct {
	cond  string
	match bool
}{
	{"size < 1KiB", false},
	{"not size < 1KiB", false},
	{"size >= 1KiB", false},
	{"not size >= 1KiB", false},
	{"size != 0", false},
	{"size in 0..8388607TiB", false},
	{"not size in 0..1", false},
	{"size unknown", true},
	{"not size unknown", false},
	{"size < 1KiB or *.a", true},        // unknown or true = true
	{"size < 1KiB or *.b", false},       // unknown or false = unknown
	{"size < 1KiB and *.a", false},      // unknown and true = unknown
	{"size < 1KiB and *.b", false},      // unknown and false = false
	{"not (size < 1KiB and *.b)", true}, // not false = true
	{"not (size < 1KiB or *.b)", false}, // not unknown = unknown
	{"not (size < 1KiB or *.a)", false}, // not true = false
	{"not (size < 1KiB and *.a)", false},
	{"(size < 1KiB or size >= 1KiB) and type image/*", false}, // unknown, even though it is a tautology
	{"size < 1KiB or size unknown", true},
}

func TestUnknownSize(t *testing.T) {
	for _, tt := range unknownSizeTests {
		p := mustParse(t, tt.cond+" => HIT")
		class, _ := p.Evaluate(Object{Key: "dir/x.a", Size: -1, ContentType: "image/png"})
		if got := class == "HIT"; got != tt.match {
			t.Errorf("%s with unknown size: match %v, want %v", tt.cond, got, tt.match)
		}
	}
}

func TestSizes(t *testing.T) {
	for _, tt := range sizeTests {
		t.Run(tt.cond, func(t *testing.T) {
			p := mustParse(t, tt.cond+" => HIT")
			for _, n := range tt.yes {
				if class, _ := p.Evaluate(Object{Key: "k", Size: n}); class != "HIT" {
					t.Errorf("size %d: no match, want a match", n)
				}
			}
			for _, n := range tt.no {
				if class, _ := p.Evaluate(Object{Key: "k", Size: n}); class != "" {
					t.Errorf("size %d: match, want none", n)
				}
			}
			if class, _ := p.Evaluate(Object{Key: "k", Size: -1}); class != "" {
				t.Errorf("unknown size: match, want none")
			}
			want := tt.canonical
			if want == "" {
				want = tt.cond
			}
			if got := p.String(); got != want+" => HIT\n" {
				t.Errorf("String() = %q, want %q", got, want+" => HIT\n")
			}
		})
	}
}

var parseErrorTests = []struct {
	name, src, want string
}{
	{"misspelled keyword", "sise < 1KiB => X", `line 1, col 6: want and, or or =>, got "<" ("sise" was read as a key glob`},
	{"size without operator", "size => X", `line 1, col 6: want <, <=, >, >=, =, !=, in or unknown after size, got "=>" (write key size`},
	{"unknown size operator", "size ~ 5 => X", `line 1, col 6: want <, <=, >, >=, =, !=, in or unknown after size, got "~"`},
	{"missing => at end", "*.a", "line 1, col 4: missing => CLASS at end of rule"},
	{"missing =>", "*.a X", `line 1, col 5: want and, or or =>, got "X"`},
	{"missing =>, comment", "*.a # X", "line 1, col 5: missing => CLASS"},
	{"missing class", "*.a =>", "line 1, col 7: missing class name after =>"},
	{"missing class, comment", "*.a => # c", "line 1, col 8: missing class name after =>"},
	{"missing class before action", "*.a => stop", "line 1, col 8: missing class name before stop"},
	{"class with a bad character", "*.a => EC4.2", `line 1, col 11: character '.' not allowed in a class name`},
	{"class that is not a name", "*.a => (X)", `line 1, col 8: want a class name (letters, digits, _ and -) after =>, got "(X)"`},
	{"unknown unit", "# comment\n\n  size < 64KiX => X", `line 3, col 12: unknown unit "KiX" (want B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)`},
	{"unknown unit e", "size < 1e6 => X", `line 1, col 9: unknown unit "e"`},
	{"bad number", "size < abc => X", `line 1, col 8: want a size such as 64KiB, got "abc"`},
	{"negative number", "size > -1 => X", `line 1, col 8: want a size such as 64KiB, got "-1"`},
	{"missing number", "size > => X", `line 1, col 8: want a size such as 64KiB, got "=>"`},
	{"fraction of a byte", "size < 1.5 => X", "line 1, col 8: size 1.5 is not a whole number of bytes"},
	{"fraction of a byte with unit", "size < 0.0001KB => X", "size 0.0001KB is not a whole number of bytes"},
	{"number too large", "size < 8388608TiB => X", "line 1, col 8: size 8388608TiB is too large"},
	{"number too long", "size < 1234567890123456789012345678901 => X", "is too long"},
	{"malformed number", "size < 1.5.3KiB => X", `line 1, col 8: malformed number "1.5.3"`},
	{"number followed by junk", "size < 15KiB3 => X", `line 1, col 13: want and, or or =>, got "3"`},
	{"empty range", "size in 2KiB..1KiB => X", "line 1, col 6: size range is empty"},
	{"equal range", "size in 1..1 => X", "size range is empty"},
	{"range without ..", "size in 1KiB 2KiB => X", `line 1, col 14: want .. in size range, got "2KiB"`},
	{"unterminated string", `key "abc => X`, `line 1, col 5: string not closed with " before the end of the line`},
	{"unterminated string, escaped quote", `key "abc\" => X`, "string not closed"},
	{"regex does not compile", `key ~ "(" => X`, "line 1, col 7: regex \"(\" does not compile: missing closing ): `(`"},
	{"regex repeat too large", `key ~ "a{2000}" => X`, `regex "a{2000}" does not compile: invalid repeat count`},
	{"regex not quoted", "key ~ ab => X", `line 1, col 7: want a quoted regular expression after key ~, got "ab"`},
	{"key without argument", "key => X", `line 1, col 5: want a glob or ~ "REGEX" after key, got "=>"`},
	{"type regex", `type ~ "x" => X`, "line 1, col 6: type takes a glob"},
	{"type without argument", "type", "line 1, col 5: want a glob after type, got end of line"},
	{"trailing garbage after action", "*.a => X stop now", `line 1, col 15: unexpected "now" at end of rule`},
	{"trailing garbage after class", "*.a => X Y", `line 1, col 10: want stop, continue or end of line after class X, got "Y"`},
	{"unclosed parenthesis", "(*.a => X", `line 1, col 6: want and, or or ) to close the ( at col 1, got "=>"`},
	{"unclosed parenthesis at end", "(*.a", "line 1, col 5: want and, or or ) to close the ( at col 1, got end of line"},
	{"extra closing parenthesis", "*.a) => X", `line 1, col 4: want and, or or =>, got ")"`},
	{"empty parentheses", "() => X", `line 1, col 2: want a condition (a glob, key, type, size, not or parenthesis), got ")"`},
	{"nothing before =>", "=> X", "line 1, col 1: missing condition before =>"},
	{"not without operand", "not => X", "line 1, col 5: missing condition before =>"},
	{"leading and", "and *.a => X", "line 1, col 1: missing condition before and"},
	{"dangling and", "*.a and => X", "line 1, col 9: missing condition before =>"},
	{"double or", "*.a or or *.b => X", "line 1, col 8: missing condition before or"},
	{"glob class not closed", "[abc => X", `line 1, col 1: glob "[abc": character class "[abc" is not closed with ]`},
	{"glob ** inside an element", "logs/**.gz => X", `line 1, col 1: glob "logs/**.gz": ** must be a whole path element`},
	{"glob class with slash", `key "a[/]b" => X`, `line 1, col 5: glob "a[/]b": character class includes "/"`},
	{"type glob error", `type "[b-a]" => X`, "line 1, col 6: glob \"[b-a]\": character class range b-a is backwards"},
	{"second default", "default A\n*.a => B\ndefault C", "line 3: second default (the first is on line 1)"},
	{"default without class", "default", "line 1, col 8: missing class name after default"},
	{"default with extra words", "default A B", `line 1, col 11: unexpected "B" after the default class`},
	{"control character", "*.a\x00 => X", "line 1, col 4: control character U+0000 not allowed"},
	{"carriage return inside a line", "*.a\r => X", "line 1, col 4: control character U+000D"},
	{"invalid UTF-8", "ab\xff => X", "line 1, col 3: not valid UTF-8"},
	{"invalid UTF-8 after U+FFFD", "a\ufffdb\xff => X", "line 1, col 4: not valid UTF-8"},
	{"nested too deeply", strings.Repeat("(", 40) + "*.a" + strings.Repeat(")", 40) + " => X", "line 1, col 33: conditions nested too deeply (more than 32 levels)"},
	{"not nested too deeply", strings.Repeat("not ", 40) + "*.a => X", "conditions nested too deeply"},
	{"column counts characters", `"é" ~ => X`, `line 1, col 5: want and, or or =>, got "~"`},
	{"several errors", "*.a => A\n*.b\n*.c => C\nsize < 1x => D\n", "line 2, col 4: missing => CLASS at end of rule\nline 4, col 9: unknown unit \"x\""},
	{"too large", strings.Repeat("# padding\n", MaxSourceSize/10+1), "more than the limit"},
}

func TestParseErrors(t *testing.T) {
	for _, tt := range parseErrorTests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded: %q", tt.src, p.String())
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q):\n got %v\nwant an error containing %q", tt.src, err, tt.want)
			}
			if !errors.Is(errors.Invalid, err) {
				t.Errorf("error kind %v, want Invalid", errors.KindOf(err))
			}
			if !strings.HasPrefix(err.Error(), "policy.Parse: ") {
				t.Errorf("error %q does not name the operation", err)
			}
		})
	}
}

func TestParseErrorDetails(t *testing.T) {
	_, err := Parse([]byte("*.a => A\n*.b => B\n\n  size < 64KiX => X\n*.c => C !"))
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("errors.As(%v, *SyntaxError) failed", err)
	}
	if se.Line != 4 || se.Col != 12 || !strings.HasPrefix(se.Msg, `unknown unit "KiX"`) {
		t.Errorf("first SyntaxError = %+v", se)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Errorf("got %d errors, want 2: %v", n, err)
	}

	// At most ten errors are reported.
	_, err = Parse([]byte(strings.Repeat("bad\n", 30)))
	if n := strings.Count(err.Error(), "line "); n != 10 || !strings.Contains(err.Error(), "too many errors") {
		t.Errorf("30 bad lines: %d errors reported, want 10 and a note: %v", n, err)
	}
}

// validSources are policies that parse, beyond those in evalTests.
var validSources = []string{
	"",
	"\n\n",
	"   # only a comment",
	"*.a=>X",
	"*.a=>X#comment",
	"\t*.a\t=>\tX\tcontinue\t",
	"*.a => X\r\n*.b => Y\r\n",
	"\ufeff*.a => X",
	"key size => X",
	"*.a => X stop # comment",
	"default X # comment",
	"default my_class-2",
	`a\ b\(c\) => X`,
	`a\#b => X`,
	`key"x y"=>X`,
	`"with space" => X`,
	`key "" => X`,
	`key ~ "" => X`,
	`key ~ "a\\\\b" => X`,
	`key ~ "^\d+\.log$" => X`,
	`key ~"x" and type"a/*" => X`,
	`"not" => X`,
	`key not => X`,
	`key and => X`,
	`keys => X`,
	`sizes* => X`,
	`not* => X`,
	`default* => X`,
	"size>=1kb and size<=2KB => X",
	"size in 0..64KiB or size in 1GiB..2GiB => X",
	"((*.a)) => X",
	"(*.a or *.b) and (*.c or *.d) => X",
	"*.a or (*.b or *.c) => X",
	"*.a and (*.b and *.c) => X",
	"not (*.a and *.b) or not *.c => X",
	"*.a => A\n" + strings.Repeat("(", 30) + "*.b" + strings.Repeat(")", 30) + " => B",
	"* => X",
	"** => X",
	"**/x/** => X",
	"type * => X",
	"size unknown => X",
	"*.txt => stopper continue",
	"*.é => X",
	"日本/*.txt => X",
}

// canonicalTests pin String's output.
var canonicalTests = []struct{ src, want string }{
	{"", ""},
	{"# only comments\n", ""},
	{"*.root => EC42", "key \"*.root\" => EC42\n"},
	{"size<64KiB=>STANDARD stop", "size < 64KiB => STANDARD\n"},
	{"x => A continue # c\n\ndefault B", "default B\nkey \"x\" => A continue\n"},
	{"(a or b) and c => X", "(key \"a\" or key \"b\") and key \"c\" => X\n"},
	{"a or (b and c) => X", "key \"a\" or key \"b\" and key \"c\" => X\n"},
	{"((a)) => X", "key \"a\" => X\n"},
	{"a and (b and c) => X", "key \"a\" and key \"b\" and key \"c\" => X\n"},
	{"(a or b) or c => X", "key \"a\" or key \"b\" or key \"c\" => X\n"},
	{"not (a and b) => X", "not (key \"a\" and key \"b\") => X\n"},
	{"not (a) => X", "not key \"a\" => X\n"},
	{"not not a => X", "not not key \"a\" => X\n"},
	{"size == 1.5 kib => X", "size = 1.5KiB => X\n"},
	{"size in 0 .. 1 => X", "size in 0..1 => X\n"},
	{`key ~ "\.gz$" => X`, "key ~ \"\\.gz$\" => X\n"},
	{`key ~ "a\\\\b" => X`, "key ~ \"a\\\\\\b\" => X\n"},
	{`key "a\"b" => X`, "key \"a\\\"b\" => X\n"},
	{`a\ b => X`, "key \"a\\ b\" => X\n"},
	{`type IMAGE/* => X`, "type \"IMAGE/*\" => X\n"},
	{briefExample, `default STANDARD
key "*.root" => EC42
size < 64KiB => STANDARD
key ~ "^logs/[0-9]{4}/.*\.gz$" and size >= 1MiB => EC83
type "image/*" or key "*.jpg" => EC42 continue
not size <= 1GiB => EC83
`},
}

func TestString(t *testing.T) {
	for _, tt := range canonicalTests {
		if got := mustParse(t, tt.src).String(); got != tt.want {
			t.Errorf("Parse(%q).String():\n got %q\nwant %q", tt.src, got, tt.want)
		}
	}
}

// allValidSources gathers every policy the tables say is valid.
func allValidSources() []string {
	srcs := slices.Clone(validSources)
	for _, tt := range evalTests {
		srcs = append(srcs, tt.src)
	}
	for _, tt := range sizeTests {
		srcs = append(srcs, tt.cond+" => X")
	}
	for _, tt := range unknownSizeTests {
		srcs = append(srcs, tt.cond+" => X")
	}
	for _, tt := range canonicalTests {
		srcs = append(srcs, tt.src)
	}
	return srcs
}

// sampleObjects are evaluated by the round-trip checks.
var sampleObjects = []Object{
	obj("", 0, ""),
	obj("x.a", -1, ""),
	obj("a/b/run1.root", 10, "application/octet-stream"),
	obj("logs/2024/01/app.gz", 2*mib, "application/gzip"),
	obj("photos/2024/IMG_1.jpg", 5*mib, "image/jpeg"),
	obj("tmp/x.b", 2*gib, "text/plain; charset=utf-8"),
	obj("a b", 1024, "IMAGE/PNG"),
	obj("dir/", 0, ""),
	obj("日本/x.txt", 64*kib, "text/plain"),
}

// checkRoundTrip checks that String's output parses to a policy with the same
// String and the same decisions.
func checkRoundTrip(t *testing.T, p *Policy, objs []Object) {
	t.Helper()
	s := p.String()
	q, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(String()) failed: %v\nString():\n%s", err, s)
	}
	if q.String() != s {
		t.Fatalf("String is not canonical:\n first %q\nsecond %q", s, q.String())
	}
	if p.Len() != q.Len() || p.Default() != q.Default() || !slices.Equal(p.Classes(), q.Classes()) {
		t.Fatalf("round trip changed the policy: %q", s)
	}
	for _, o := range objs {
		c1, r1 := p.Evaluate(o)
		c2, r2 := q.Evaluate(o)
		if c1 != c2 || r1 != r2 {
			t.Fatalf("%+v: policy says %q, %d; its String %q says %q, %d", o, c1, r1, s, c2, r2)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, src := range allValidSources() {
		p := mustParse(t, src)
		objs := slices.Clone(sampleObjects)
		for _, tt := range evalTests {
			if tt.src == src {
				for _, c := range tt.checks {
					objs = append(objs, c.obj)
				}
			}
		}
		checkRoundTrip(t, p, objs)
	}
}

func TestClassesAndLen(t *testing.T) {
	p := mustParse(t, briefExample)
	if got, want := p.Classes(), []string{"EC42", "EC83", "STANDARD"}; !slices.Equal(got, want) {
		t.Errorf("Classes() = %q, want %q", got, want)
	}
	if p.Len() != 5 || p.Default() != "STANDARD" {
		t.Errorf("Len() = %d, Default() = %q; want 5, STANDARD", p.Len(), p.Default())
	}
	if got := p.Line(2); got != 5 {
		t.Errorf("Line(2) = %d, want 5", got)
	}
	if got, want := p.Rule(2), `key ~ "^logs/[0-9]{4}/.*\.gz$" and size >= 1MiB => EC83`; got != want {
		t.Errorf("Rule(2) = %q, want %q", got, want)
	}
	if p.Source() != briefExample {
		t.Errorf("Source() does not return the text parsed")
	}
	if got := mustParse(t, "").Classes(); len(got) != 0 {
		t.Errorf("empty policy: Classes() = %q", got)
	}
}

func TestNilPolicy(t *testing.T) {
	var p *Policy
	if class, rule := p.Evaluate(obj("a", 1, "")); class != "" || rule != -1 {
		t.Errorf("nil policy: Evaluate = %q, %d", class, rule)
	}
	if p.Len() != 0 || p.String() != "" || p.Source() != "" || p.Classes() != nil || p.Default() != "" {
		t.Errorf("nil policy is not empty")
	}
	var z Policy
	if class, rule := z.Evaluate(obj("a", 1, "")); class != "" || rule != -1 {
		t.Errorf("zero policy: Evaluate = %q, %d", class, rule)
	}
}

func TestJSON(t *testing.T) {
	type bucket struct {
		Name   string  `json:"name"`
		Policy *Policy `json:"policy,omitempty"`
		Value  Policy  `json:"value"`
	}
	in := bucket{Name: "b", Policy: mustParse(t, briefExample), Value: *mustParse(t, "*.a => A")}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// The source is stored verbatim: comments survive.
	if !strings.Contains(string(data), `# photos platform`) {
		t.Errorf("JSON lost the comments: %s", data)
	}
	var out bucket
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Policy.Source() != briefExample || out.Policy.String() != in.Policy.String() || out.Value.String() != in.Value.String() {
		t.Errorf("JSON round trip changed the policy:\n%s", data)
	}
	for _, o := range sampleObjects {
		c1, r1 := in.Policy.Evaluate(o)
		c2, r2 := out.Policy.Evaluate(o)
		if c1 != c2 || r1 != r2 {
			t.Errorf("%+v: %q, %d before JSON, %q, %d after", o, c1, r1, c2, r2)
		}
	}

	// No policy, null, an empty policy.
	data, _ = json.Marshal(bucket{Name: "b"})
	if string(data) != `{"name":"b","value":""}` {
		t.Errorf("empty: %s", data)
	}
	out = bucket{}
	if err := json.Unmarshal([]byte(`{"policy":null,"value":null}`), &out); err != nil || out.Policy != nil || out.Value.Len() != 0 {
		t.Errorf("null: %v %+v", err, out)
	}

	// Bad policies are refused with kind Invalid.
	for _, bad := range []string{`{"policy":"*.a"}`, `{"policy":42}`, `{"value":"key ~ \"(\" => X"}`} {
		err := json.Unmarshal([]byte(bad), &out)
		if !errors.Is(errors.Invalid, err) {
			t.Errorf("Unmarshal(%s) = %v, want kind Invalid", bad, err)
		}
	}
}

func TestEvaluateDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool, and so regexp, allocate")
	}
	p := mustParse(t, briefExample+`
logs/**/x*y?z[a-c].gz => A
type "application/*json" => B
key ~ "(?i)^tmp/.*\.(tmp|bak)$" => C
size in 1..2 or size unknown => D
`)
	for _, o := range sampleObjects {
		o := o
		if n := testing.AllocsPerRun(100, func() { p.Evaluate(o) }); n != 0 {
			t.Errorf("Evaluate(%+v): %v allocations, want 0", o, n)
		}
	}
}

// FuzzParse checks that Parse never panics, and that when it succeeds String
// yields a policy that parses, prints the same and decides the same.
func FuzzParse(f *testing.F) {
	for _, src := range allValidSources() {
		f.Add(src)
	}
	for _, tt := range parseErrorTests {
		if len(tt.src) < 4096 {
			f.Add(tt.src)
		}
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Parse([]byte(src))
		if err != nil {
			if !errors.Is(errors.Invalid, err) {
				t.Fatalf("Parse error of kind %v: %v", errors.KindOf(err), err)
			}
			return
		}
		checkRoundTrip(t, p, sampleObjects)
		for _, c := range p.Classes() {
			if c == "" || strings.ContainsAny(c, " \t#") {
				t.Fatalf("bad class name %q", c)
			}
		}
	})
}

func ExampleParse() {
	p, err := Parse([]byte(`
default STANDARD
*.root => EC42
size < 64KiB => STANDARD
logs/**/*.gz and size >= 1MiB => EC83
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range []Object{
		{Key: "run7/events.root", Size: 5 << 30},
		{Key: "logs/2026/11/app.gz", Size: 8 << 20},
		{Key: "notes.txt", Size: 100 << 10},
	} {
		class, rule := p.Evaluate(o)
		fmt.Println(o.Key, class, rule)
	}
	_, err = Parse([]byte("size < 64KiX => STANDARD"))
	fmt.Println(err)
	// Output:
	// run7/events.root EC42 0
	// logs/2026/11/app.gz EC83 2
	// notes.txt STANDARD -1
	// policy.Parse: line 1, col 10: unknown unit "KiX" (want B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)
}
