package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A glob is a compiled glob pattern. Key globs (mode globKey) follow path rules:
//
//   - a pattern without "/" is matched against the key's last path element
//     (the part after the last "/");
//   - a pattern with "/" is matched against the whole key;
//   - "*", "?" and character classes never match "/";
//   - a path element that is exactly "**" matches any number of path elements:
//     zero or more in the middle ("a/**/b" matches "a/b" and "a/x/y/b") or at the
//     start ("**/b" matches "b" and "x/b"), one or more at the end ("a/**" matches
//     everything under "a/", not "a" itself). "**" anywhere else is an error.
//
// Content-type globs (mode globType) match the whole string, "*" matches any
// characters including "/", and ASCII letters match regardless of case.
//
// Matching never allocates. Patterns are compiled into path elements
// ("segments") and each segment into the cheapest matcher that fits it: an
// exact comparison; a prefix, suffix, substring or prefix-and-suffix test; or
// literal ends around a token list run by a backtracking matcher that takes at
// worst len(tokens) × len(element) steps.
type glob struct {
	src  string
	base bool      // key mode only: match the last path element
	deep bool      // some segment is "**"
	segs []segment // key mode: the path elements; type mode: exactly one
	// Quick rejects on the whole key (key mode, whole-key patterns only).
	prefix, suffix string
}

type globMode uint8

const (
	globKey globMode = iota
	globType
)

type segKind uint8

const (
	segLiteral  segKind = iota // exact: lit
	segAny                     // "*": anything
	segPrefix                  // "lit*"
	segSuffix                  // "*lit"
	segContains                // "*lit*"
	segPreSuf                  // "pre*suf"
	segGeneral                 // pre, then toks, then suf
	segDeep                    // "**" as a whole path element
)

// A segment matches one path element (key mode) or the whole string (type mode).
type segment struct {
	kind segKind
	fold bool // ASCII case-insensitive; literals are stored in lower case
	lit  string
	toks []token
	// For segPreSuf and segGeneral: literal text every match starts and ends
	// with; toks match what lies between.
	pre, suf string
}

type tokKind uint8

const (
	tokLit   tokKind = iota // lit
	tokOne                  // "?": one character
	tokStar                 // "*": any characters
	tokClass                // "[...]"
	tokSep                  // "/" (compile time only)
	tokDeep                 // "**" (compile time only)
)

type token struct {
	kind  tokKind
	lit   string
	class *charClass
}

// A charClass is a bracket expression: a set of rune ranges, possibly negated.
type charClass struct {
	neg    bool
	ranges []runeRange
}

type runeRange struct{ lo, hi rune }

func (c *charClass) matches(r rune) bool {
	in := false
	for _, rg := range c.ranges {
		if rg.lo <= r && r <= rg.hi {
			in = true
			break
		}
	}
	return in != c.neg
}

// compileGlob compiles pattern. Errors describe the problem without position;
// the parser adds it.
func compileGlob(pattern string, mode globMode) (*glob, error) {
	toks, err := lexGlob(pattern, mode)
	if err != nil {
		return nil, err
	}
	g := &glob{src: pattern}
	if mode == globType {
		seg, err := makeSegment(toks, true)
		if err != nil {
			return nil, err
		}
		g.segs = []segment{seg}
		return g, nil
	}

	// Split into path elements.
	var groups [][]token
	start := 0
	for i, t := range toks {
		if t.kind == tokSep {
			groups = append(groups, toks[start:i])
			start = i + 1
		}
	}
	groups = append(groups, toks[start:])
	g.base = len(groups) == 1
	for _, grp := range groups {
		seg, err := makeSegment(grp, false)
		if err != nil {
			return nil, err
		}
		if seg.kind == segDeep {
			g.deep = true
		}
		g.segs = append(g.segs, seg)
	}
	if g.base {
		if g.deep { // "**" alone: any last element
			g.segs[0] = segment{kind: segAny}
			g.deep = false
		}
		return g, nil
	}
	// A trailing "**" needs at least one element: "a/**" is "a/" + "*" + "/**".
	if n := len(g.segs); g.segs[n-1].kind == segDeep {
		g.segs = append(g.segs[:n-1], segment{kind: segAny}, segment{kind: segDeep})
	}

	// Literal prefix: every literal token and separator before the first wildcard.
	var b strings.Builder
	for _, t := range toks {
		if t.kind == tokLit {
			b.WriteString(t.lit)
		} else if t.kind == tokSep {
			b.WriteByte('/')
		} else {
			break
		}
	}
	g.prefix = b.String()
	// Literal suffix: every literal token and separator after the last wildcard,
	// except the separator right after a "**", which may match no element at all
	// ("**/b" matches "b", "a/**/b" matches "a/b").
	last := -1
	for i, t := range toks {
		if t.kind != tokLit && t.kind != tokSep {
			last = i
		}
	}
	if last >= 0 {
		from := last + 1
		if toks[last].kind == tokDeep && from < len(toks) && toks[from].kind == tokSep {
			from++
		}
		b.Reset()
		for _, t := range toks[from:] {
			if t.kind == tokLit {
				b.WriteString(t.lit)
			} else {
				b.WriteByte('/')
			}
		}
		g.suffix = b.String()
	}
	return g, nil
}

// lexGlob splits pattern into tokens, merging adjacent literals and stars.
func lexGlob(p string, mode globMode) ([]token, error) {
	var toks []token
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			toks = append(toks, token{kind: tokLit, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\':
			if i+1 >= len(p) {
				return nil, fmt.Errorf("ends with a lone backslash")
			}
			r, w := utf8.DecodeRuneInString(p[i+1:])
			i += 1 + w
			if r == '/' && mode == globKey {
				flush()
				toks = append(toks, token{kind: tokSep})
				continue
			}
			lit.WriteRune(r)
		case c == '*':
			j := i
			for j < len(p) && p[j] == '*' {
				j++
			}
			flush()
			kind := tokStar
			if j-i >= 2 && mode == globKey {
				kind = tokDeep
			}
			toks = append(toks, token{kind: kind})
			i = j
		case c == '?':
			flush()
			toks = append(toks, token{kind: tokOne})
			i++
		case c == '[':
			flush()
			cls, n, err := lexClass(p[i:], mode)
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tokClass, class: cls})
			i += n
		case c == '/' && mode == globKey:
			flush()
			toks = append(toks, token{kind: tokSep})
			i++
		default:
			r, w := utf8.DecodeRuneInString(p[i:])
			lit.WriteRune(r)
			i += w
		}
	}
	flush()
	return toks, nil
}

// lexClass parses the bracket expression at the start of p and returns it and its
// length in bytes.
func lexClass(p string, mode globMode) (*charClass, int, error) {
	cls := &charClass{}
	i := 1
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		cls.neg = true
		i++
	}
	first := true
	next := func() (rune, bool) { // one member rune, honouring backslash escapes
		if p[i] == '\\' {
			if i+1 >= len(p) {
				return 0, false
			}
			r, w := utf8.DecodeRuneInString(p[i+1:])
			i += 1 + w
			return r, true
		}
		r, w := utf8.DecodeRuneInString(p[i:])
		i += w
		return r, true
	}
	for {
		if i >= len(p) {
			return nil, 0, fmt.Errorf("character class %q is not closed with ]", p)
		}
		if p[i] == ']' && !first {
			i++
			break
		}
		first = false
		lo, ok := next()
		if !ok {
			return nil, 0, fmt.Errorf("character class %q is not closed with ]", p)
		}
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			i++
			if hi, ok = next(); !ok {
				return nil, 0, fmt.Errorf("character class %q is not closed with ]", p)
			}
			if hi < lo {
				return nil, 0, fmt.Errorf("character class range %c-%c is backwards", lo, hi)
			}
		}
		if mode == globType {
			lo, hi = foldRange(lo, hi, cls)
		}
		if mode == globKey && lo <= '/' && '/' <= hi {
			return nil, 0, fmt.Errorf("character class includes \"/\" (in keys, *, ? and [...] never match \"/\")")
		}
		cls.ranges = append(cls.ranges, runeRange{lo, hi})
	}
	return cls, i, nil
}

// foldRange makes a class case-insensitive for ASCII letters: input runes are
// lower-cased before the test, so every range gains its lower-case image. It
// appends the image of the upper-case letters in [lo, hi] and returns lo, hi.
func foldRange(lo, hi rune, cls *charClass) (rune, rune) {
	a, b := max(lo, 'A'), min(hi, 'Z')
	if a <= b {
		cls.ranges = append(cls.ranges, runeRange{a + 'a' - 'A', b + 'a' - 'A'})
	}
	return lo, hi
}

// makeSegment classifies one path element's tokens.
func makeSegment(toks []token, fold bool) (segment, error) {
	for _, t := range toks {
		if t.kind == tokDeep {
			if len(toks) != 1 {
				return segment{}, fmt.Errorf("** must be a whole path element, as in \"logs/**/*.gz\" (use * within an element)")
			}
			return segment{kind: segDeep}, nil
		}
	}
	if fold {
		for i := range toks {
			if toks[i].kind == tokLit {
				toks[i].lit = lowerASCII(toks[i].lit)
			}
		}
	}
	s := segment{fold: fold}
	isLit := func(i int) bool { return i < len(toks) && toks[i].kind == tokLit }
	isStar := func(i int) bool { return i < len(toks) && toks[i].kind == tokStar }
	switch {
	case len(toks) == 0:
		s.kind = segLiteral
	case len(toks) == 1 && isLit(0):
		s.kind, s.lit = segLiteral, toks[0].lit
	case len(toks) == 1 && isStar(0):
		s.kind = segAny
	case len(toks) == 2 && isLit(0) && isStar(1):
		s.kind, s.lit = segPrefix, toks[0].lit
	case len(toks) == 2 && isStar(0) && isLit(1):
		s.kind, s.lit = segSuffix, toks[1].lit
	case len(toks) == 3 && isStar(0) && isLit(1) && isStar(2):
		s.kind, s.lit = segContains, toks[1].lit
	default:
		// Peel the literal ends off: the rest matches what lies between them.
		if isLit(0) {
			s.pre, toks = toks[0].lit, toks[1:]
		}
		if n := len(toks); isLit(n - 1) {
			s.suf, toks = toks[n-1].lit, toks[:n-1]
		}
		s.kind, s.toks = segGeneral, toks
		if len(toks) == 1 && toks[0].kind == tokStar {
			s.kind, s.toks = segPreSuf, nil
		}
	}
	return s, nil
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.Map(func(r rune) rune {
				if 'A' <= r && r <= 'Z' {
					return r + 'a' - 'A'
				}
				return r
			}, s)
		}
	}
	return s
}

// matchKey reports whether the key glob matches key.
func (g *glob) matchKey(key, base string) bool {
	if g.base {
		return g.segs[0].match(base)
	}
	if len(key) < len(g.prefix)+len(g.suffix) ||
		key[:len(g.prefix)] != g.prefix || key[len(key)-len(g.suffix):] != g.suffix {
		return false
	}
	if !g.deep {
		pos := 0
		for i := range g.segs {
			if pos > len(key) {
				return false
			}
			el, next := element(key, pos)
			if !g.segs[i].match(el) {
				return false
			}
			pos = next
		}
		return pos > len(key)
	}
	// The last pattern element, unless it is "**", matches the last key
	// element: a cheap test that rejects most keys before the search.
	if last := &g.segs[len(g.segs)-1]; last.kind != segDeep && !last.match(base) {
		return false
	}
	// Like the token matcher below, over path elements: "**" is the star,
	// and on a mismatch the last "**" takes one more element.
	end := len(key) + 1
	pi, pos := 0, 0
	starP, starPos := -1, 0
	for {
		if pi < len(g.segs) {
			sg := &g.segs[pi]
			if sg.kind == segDeep {
				starP, starPos = pi, pos
				pi++
				continue
			}
			if pos < end {
				if el, next := element(key, pos); sg.match(el) {
					pi, pos = pi+1, next
					continue
				}
			}
		} else if pos == end {
			return true
		}
		if starP < 0 || starPos >= end {
			return false
		}
		_, starPos = element(key, starPos)
		pi, pos = starP+1, starPos
	}
}

// matchType reports whether the content-type glob matches the media type mt.
func (g *glob) matchType(mt string) bool { return g.segs[0].match(mt) }

// element returns the path element of key that starts at pos and the start of
// the next one (len(key)+1 after the last).
func element(key string, pos int) (string, int) {
	// A plain loop: path elements are short, and for short strings it beats
	// the call into strings.IndexByte.
	for i := pos; i < len(key); i++ {
		if key[i] == '/' {
			return key[pos:i], i + 1
		}
	}
	return key[pos:], len(key) + 1
}

func (s *segment) match(str string) bool {
	switch s.kind {
	case segAny:
		return true
	case segLiteral:
		return eqFold(str, s.lit, s.fold)
	case segPrefix:
		return len(str) >= len(s.lit) && eqFold(str[:len(s.lit)], s.lit, s.fold)
	case segSuffix:
		return len(str) >= len(s.lit) && eqFold(str[len(str)-len(s.lit):], s.lit, s.fold)
	case segContains:
		if !s.fold {
			return strings.Contains(str, s.lit)
		}
		for i := 0; i+len(s.lit) <= len(str); i++ {
			if eqFold(str[i:i+len(s.lit)], s.lit, true) {
				return true
			}
		}
		return false
	case segPreSuf, segGeneral:
		if len(str) < len(s.pre)+len(s.suf) ||
			!eqFold(str[:len(s.pre)], s.pre, s.fold) ||
			!eqFold(str[len(str)-len(s.suf):], s.suf, s.fold) {
			return false
		}
		return s.kind == segPreSuf || matchTokens(s.toks, str[len(s.pre):len(str)-len(s.suf)], s.fold)
	}
	return false // segDeep is handled by the caller
}

// matchTokens is the classic wildcard matcher: on a mismatch, the most recent
// star takes one more character and matching resumes after it. Earlier stars
// never need to be revisited because a later star can absorb anything they
// could. Stars advance by whole UTF-8 sequences so that "?" and classes see
// whole characters.
func matchTokens(toks []token, s string, fold bool) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case tokStar:
				starT, starS = ti, si
				ti++
				continue
			case tokLit:
				if len(s)-si >= len(t.lit) && eqFold(s[si:si+len(t.lit)], t.lit, fold) {
					ti, si = ti+1, si+len(t.lit)
					continue
				}
			case tokOne:
				if si < len(s) {
					ti, si = ti+1, si+runeLen(s, si)
					continue
				}
			case tokClass:
				if si < len(s) {
					r, w := rune(s[si]), 1
					if r >= utf8.RuneSelf {
						r, w = utf8.DecodeRuneInString(s[si:])
					}
					if fold && 'A' <= r && r <= 'Z' {
						r += 'a' - 'A'
					}
					if t.class.matches(r) {
						ti, si = ti+1, si+w
						continue
					}
				}
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS >= len(s) {
			return false
		}
		starS += runeLen(s, starS)
		ti, si = starT+1, starS
	}
}

func runeLen(s string, i int) int {
	if s[i] < utf8.RuneSelf {
		return 1
	}
	_, w := utf8.DecodeRuneInString(s[i:])
	return w
}

// eqFold reports whether s equals lit, which is in lower case when fold is set;
// with fold, ASCII letters in s compare case-insensitively.
func eqFold(s, lit string, fold bool) bool {
	if !fold {
		return s == lit
	}
	if len(s) != len(lit) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[i] {
			return false
		}
	}
	return true
}
