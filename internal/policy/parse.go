package policy

import (
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/cairnfs/cairn/internal/errors"
)

// Limits on what Parse accepts. They keep a policy small enough to live in the
// cluster map and cheap enough to evaluate on every PUT.
const (
	MaxSourceSize = 64 << 10 // bytes of policy text
	maxDepth      = 32       // nesting of parentheses and not
	maxErrors     = 10       // syntax errors reported by one Parse
	maxDigits     = 30       // digits in one size
)

// SyntaxError is one error in a policy file. Parse returns an *errors.Error of
// kind Invalid that wraps one SyntaxError per bad line (at most ten); use
// errors.As to get the first.
type SyntaxError struct {
	Line int    // 1-based
	Col  int    // 1-based, in characters; 0 if the error concerns the whole line
	Msg  string // what is wrong and, where it helps, what was expected
}

func (e *SyntaxError) Error() string {
	if e.Col == 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d, col %d: %s", e.Line, e.Col, e.Msg)
}

// Parse parses a policy file.
//
// The file has one statement per line. "#" starts a comment anywhere outside a
// quoted string; blank lines are ignored. A statement is either
//
//	default CLASS
//
// which names the class for objects that no rule matches (at most once), or a
// rule
//
//	CONDITION => CLASS [stop|continue]
//
// CLASS is a name of letters, digits, "_" and "-". Conditions are built from
//
//	key GLOB          the key matches the glob (see below)
//	GLOB              short for key GLOB
//	key ~ "REGEX"     the key contains a match of the RE2 expression (anchor it with ^ and $)
//	type GLOB         the media type (e.g. image/png) matches; "*" matches any characters, case is ignored
//	size OP SIZE      OP is <, <=, >, >=, = (or ==), !=
//	size in A..B      A <= size < B
//	size unknown      the size is not known (see Policy.Evaluate)
//	not C, C and C, C or C, (C)
//
// with not binding tighter than and, and and tighter than or. A SIZE is a
// number, optionally with a decimal fraction, and a unit: B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), in any case; a
// bare number counts bytes. The result must be a whole number of bytes.
//
// A GLOB is a quoted string or a run of characters up to a space, "(", ")",
// "#", "\"" or "=>". In it "*" matches any characters except "/", "?" one
// character except "/", "[abc]", "[a-z]" and "[!a-z]" (or "[^a-z]") one
// character in or not in the set (never "/"), and a backslash makes the next
// character literal. A glob without "/" is matched against the key's last path
// element, so "*.root" matches "a/b/c.root". A glob with "/" is matched against
// the whole key. A path element that is exactly "**" matches any number of
// path elements: "logs/**/*.gz", "**/tmp/*", "backup/**".
//
// Inside quotes, \" stands for a quote and \\ for a backslash; any other
// backslash is kept as it is, so "\.gz$" is the regular expression \.gz$.
//
// On bad input Parse returns an error of kind errors.Invalid that names the
// line and column of each problem (see SyntaxError). An empty file is a valid
// policy with no rules.
func Parse(src []byte) (*Policy, error) {
	const op errors.Op = "policy.Parse"
	if len(src) > MaxSourceSize {
		return nil, errors.Errorf(op, errors.Invalid, "policy is %d bytes, more than the limit of %d", len(src), MaxSourceSize)
	}
	pol := &Policy{src: string(src)}
	var errs []error
	defLine := 0
	text := strings.TrimPrefix(pol.src, "\ufeff") // a byte order mark some editors write
	for lineNo := 1; text != "" && len(errs) < maxErrors; lineNo++ {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		line = strings.TrimSuffix(line, "\r")
		p := &parser{line: line, lineNo: lineNo}
		r, def, err := p.statement()
		switch {
		case err != nil:
			errs = append(errs, err)
		case def != "" && defLine != 0:
			errs = append(errs, &SyntaxError{Line: lineNo, Msg: fmt.Sprintf("second default (the first is on line %d)", defLine)})
		case def != "":
			pol.def, defLine = def, lineNo
		case r != nil:
			pol.rules = append(pol.rules, *r)
		}
	}
	if len(errs) == maxErrors && text != "" {
		errs = append(errs, fmt.Errorf("too many errors; stopped"))
	}
	if len(errs) > 0 {
		return nil, errors.E(op, errors.Invalid, errors.Join(errs...))
	}
	return pol, nil
}

// parser reads one line. Every method that fails returns a *SyntaxError.
type parser struct {
	line   string
	lineNo int
	pos    int // byte offset in line
	depth  int
	// The last bare glob read and where it ends, to explain "sise < 1" errors.
	bare    string
	bareEnd int
}

func (p *parser) errAt(pos int, format string, args ...any) error {
	return &SyntaxError{
		Line: p.lineNo,
		Col:  utf8.RuneCountInString(p.line[:min(pos, len(p.line))]) + 1,
		Msg:  fmt.Sprintf(format, args...),
	}
}

// statement parses the line: a rule, a default (its class), or nothing.
func (p *parser) statement() (r *rule, def string, err error) {
	if !utf8.ValidString(p.line) {
		for i := 0; i < len(p.line); {
			r, w := utf8.DecodeRuneInString(p.line[i:])
			if r == utf8.RuneError && w == 1 {
				return nil, "", p.errAt(i, "not valid UTF-8")
			}
			i += w
		}
	}
	for i, c := range p.line {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return nil, "", p.errAt(i, "control character %U not allowed (use a regular expression escape to match it)", c)
		}
	}
	p.skipSpace()
	if p.eol() {
		return nil, "", nil
	}
	if id, end := p.ident(); id == "default" && p.delimAt(end, "") {
		p.pos = end
		class, err := p.class("default")
		if err != nil {
			return nil, "", err
		}
		if p.skipSpace(); !p.eol() {
			return nil, "", p.errAt(p.pos, "unexpected %s after the default class", p.found())
		}
		return nil, class, nil
	}
	c, err := p.or()
	if err != nil {
		return nil, "", err
	}
	p.skipSpace()
	if !strings.HasPrefix(p.line[p.pos:], "=>") {
		if p.eol() {
			return nil, "", p.errAt(p.pos, "missing => CLASS at end of rule")
		}
		return nil, "", p.errAt(p.pos, "want and, or or =>, got %s%s", p.found(), p.bareHint())
	}
	p.pos += 2
	r = &rule{cond: c, line: p.lineNo}
	if r.class, err = p.class("=>"); err != nil {
		return nil, "", err
	}
	p.skipSpace()
	if p.eol() {
		return r, "", nil
	}
	switch id, end := p.ident(); {
	case id == "stop" && p.delimAt(end, ""):
		p.pos = end
	case id == "continue" && p.delimAt(end, ""):
		p.pos, r.cont = end, true
	default:
		return nil, "", p.errAt(p.pos, "want stop, continue or end of line after class %s, got %s", r.class, p.found())
	}
	if p.skipSpace(); !p.eol() {
		return nil, "", p.errAt(p.pos, "unexpected %s at end of rule", p.found())
	}
	return r, "", nil
}

// class parses a class name after the word `after`.
func (p *parser) class(after string) (string, error) {
	p.skipSpace()
	start := p.pos
	for p.pos < len(p.line) && isClassChar(p.line[p.pos]) {
		p.pos++
	}
	name := p.line[start:p.pos]
	switch {
	case name == "" && p.eol():
		return "", p.errAt(start, "missing class name after %s", after)
	case name == "":
		return "", p.errAt(start, "want a class name (letters, digits, _ and -) after %s, got %s", after, p.found())
	case !p.delimAt(p.pos, ""):
		r, _ := utf8.DecodeRuneInString(p.line[p.pos:])
		return "", p.errAt(p.pos, "character %q not allowed in a class name (letters, digits, _ and -)", r)
	case name == "stop" || name == "continue":
		return "", p.errAt(start, "missing class name before %s", name)
	}
	return name, nil
}

func isClassChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// or parses C { or C }.
func (p *parser) or() (*cond, error) {
	return p.binary(opOr, "or", p.and)
}

// and parses C { and C }.
func (p *parser) and() (*cond, error) {
	return p.binary(opAnd, "and", p.unary)
}

func (p *parser) binary(op condOp, word string, operand func() (*cond, error)) (*cond, error) {
	c, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		p.skipSpace()
		id, end := p.ident()
		if id != word || !p.delimAt(end, "(\"") {
			return c, nil
		}
		p.pos = end
		d, err := operand()
		if err != nil {
			return nil, err
		}
		if c.op != op {
			c = &cond{op: op, kids: []*cond{c}}
		}
		if d.op == op { // (a and b) and c is a and b and c
			c.kids = append(c.kids, d.kids...)
		} else {
			c.kids = append(c.kids, d)
		}
	}
}

// unary parses not C, ( C ), and the predicates.
func (p *parser) unary() (*cond, error) {
	p.skipSpace()
	start := p.pos
	if p.eol() {
		return nil, p.errAt(start, "want a condition (a glob, key, type, size, not or parenthesis), got end of line")
	}
	if p.depth >= maxDepth {
		return nil, p.errAt(start, "conditions nested too deeply (more than %d levels)", maxDepth)
	}
	switch {
	case p.line[start] == '(':
		p.pos++
		p.depth++
		c, err := p.or()
		p.depth--
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.line) || p.line[p.pos] != ')' {
			return nil, p.errAt(p.pos, "want and, or or ) to close the ( at col %d, got %s%s", utf8.RuneCountInString(p.line[:start])+1, p.found(), p.bareHint())
		}
		p.pos++
		return c, nil
	case p.line[start] == '"':
		s, err := p.quoted()
		if err != nil {
			return nil, err
		}
		return p.keyGlob(s, start)
	case strings.HasPrefix(p.line[start:], "=>"):
		return nil, p.errAt(start, "missing condition before =>")
	}
	id, end := p.ident()
	switch {
	case id == "not" && p.delimAt(end, "(\""):
		p.pos = end
		p.depth++
		c, err := p.unary()
		p.depth--
		if err != nil {
			return nil, err
		}
		return &cond{op: opNot, kids: []*cond{c}}, nil
	case id == "key" && p.delimAt(end, "\"~"):
		p.pos = end
		return p.keyPredicate()
	case id == "type" && p.delimAt(end, "\""):
		p.pos = end
		return p.typePredicate()
	case id == "size" && p.delimAt(end, "<>=!"):
		p.pos = end
		return p.sizePredicate()
	case (id == "and" || id == "or") && p.delimAt(end, "(\""):
		return nil, p.errAt(start, "missing condition before %s", id)
	}
	w := p.word()
	if w == "" {
		return nil, p.errAt(start, "want a condition (a glob, key, type, size, not or parenthesis), got %s", p.found())
	}
	p.bare, p.bareEnd = w, p.pos
	return p.keyGlob(w, start)
}

func (p *parser) keyGlob(pattern string, at int) (*cond, error) {
	g, err := compileGlob(pattern, globKey)
	if err != nil {
		return nil, p.errAt(at, "glob %q: %v", pattern, err)
	}
	return &cond{op: opKeyGlob, glob: g}, nil
}

// keyPredicate parses what follows key: ~ "REGEX" or GLOB.
func (p *parser) keyPredicate() (*cond, error) {
	p.skipSpace()
	start := p.pos
	if p.pos < len(p.line) && p.line[p.pos] == '~' {
		p.pos++
		p.skipSpace()
		start = p.pos
		if p.pos >= len(p.line) || p.line[p.pos] != '"' {
			return nil, p.errAt(start, "want a quoted regular expression after key ~, got %s", p.found())
		}
		s, err := p.quoted()
		if err != nil {
			return nil, err
		}
		re, err := regexp.Compile(s)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "error parsing regexp: ")
			return nil, p.errAt(start, "regex %q does not compile: %s", s, msg)
		}
		return &cond{op: opKeyRegex, re: re, reSrc: s}, nil
	}
	s, err := p.globArg("key")
	if err != nil {
		return nil, err
	}
	return p.keyGlob(s, start)
}

// typePredicate parses the GLOB after type.
func (p *parser) typePredicate() (*cond, error) {
	p.skipSpace()
	start := p.pos
	if p.pos < len(p.line) && p.line[p.pos] == '~' {
		return nil, p.errAt(start, "type takes a glob such as \"image/*\", not a regular expression")
	}
	s, err := p.globArg("type")
	if err != nil {
		return nil, err
	}
	g, err := compileGlob(s, globType)
	if err != nil {
		return nil, p.errAt(start, "glob %q: %v", s, err)
	}
	return &cond{op: opTypeGlob, glob: g}, nil
}

// globArg parses a quoted or bare glob after the word `after`.
func (p *parser) globArg(after string) (string, error) {
	if p.pos < len(p.line) && p.line[p.pos] == '"' {
		return p.quoted()
	}
	start := p.pos
	w := p.word()
	if w == "" {
		if after == "key" {
			return "", p.errAt(start, "want a glob or ~ \"REGEX\" after key, got %s", p.found())
		}
		return "", p.errAt(start, "want a glob after %s, got %s", after, p.found())
	}
	return w, nil
}

// sizePredicate parses what follows size.
func (p *parser) sizePredicate() (*cond, error) {
	p.skipSpace()
	rest := p.line[p.pos:]
	if strings.HasPrefix(rest, "=>") {
		return nil, p.errAt(p.pos, "want <, <=, >, >=, =, !=, in or unknown after size, got \"=>\" (write key size to match a key named size)")
	}
	for _, o := range [...]struct {
		s   string
		cmp cmpOp
	}{{"<=", cmpLE}, {">=", cmpGE}, {"!=", cmpNE}, {"==", cmpEQ}, {"<", cmpLT}, {">", cmpGT}, {"=", cmpEQ}} {
		if strings.HasPrefix(rest, o.s) {
			p.pos += len(o.s)
			n, err := p.size()
			if err != nil {
				return nil, err
			}
			return &cond{op: opSizeCmp, cmp: o.cmp, a: n}, nil
		}
	}
	start := p.pos
	id, end := p.ident()
	switch {
	case id == "unknown" && p.delimAt(end, ""):
		p.pos = end
		return &cond{op: opSizeUnknown}, nil
	case id == "in" && p.delimAt(end, ""):
		p.pos = end
		a, err := p.size()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if !strings.HasPrefix(p.line[p.pos:], "..") {
			return nil, p.errAt(p.pos, "want .. in size range, got %s", p.found())
		}
		p.pos += 2
		b, err := p.size()
		if err != nil {
			return nil, err
		}
		if a.n >= b.n {
			return nil, p.errAt(start, "size range is empty: in A..B means A <= size < B, so A must be less than B")
		}
		return &cond{op: opSizeIn, a: a, b: b}, nil
	}
	return nil, p.errAt(start, "want <, <=, >, >=, =, !=, in or unknown after size, got %s", p.found())
}

// size parses a number with an optional unit, such as 64KiB, 1.5 GB or 4096.
func (p *parser) size() (size, error) {
	p.skipSpace()
	start := p.pos
	digits := func() string {
		i := p.pos
		for p.pos < len(p.line) && '0' <= p.line[p.pos] && p.line[p.pos] <= '9' {
			p.pos++
		}
		return p.line[i:p.pos]
	}
	whole := digits()
	if whole == "" {
		return size{}, p.errAt(start, "want a size such as 64KiB, got %s", p.found())
	}
	var frac string
	if p.pos+1 < len(p.line) && p.line[p.pos] == '.' && '0' <= p.line[p.pos+1] && p.line[p.pos+1] <= '9' {
		p.pos++
		frac = digits()
	}
	num := p.line[start:p.pos]
	if p.pos+1 < len(p.line) && p.line[p.pos] == '.' && p.line[p.pos+1] != '.' {
		end := p.pos
		for end < len(p.line) && (p.line[end] == '.' || '0' <= p.line[end] && p.line[end] <= '9') {
			end++
		}
		return size{}, p.errAt(start, "malformed number %q", p.line[start:end])
	}
	if len(whole)+len(frac) > maxDigits {
		return size{}, p.errAt(start, "number %q is too long", num)
	}
	letters := func() string {
		i := p.pos
		for p.pos < len(p.line) && isLetter(p.line[p.pos]) {
			p.pos++
		}
		return p.line[i:p.pos]
	}
	var unit uint8
	ustart := p.pos
	if u := letters(); u != "" {
		var ok bool
		if unit, ok = lookupUnit(u); !ok {
			return size{}, p.errAt(ustart, "unknown unit %q (want %s)", u, unitList)
		}
	} else { // a unit may also follow after spaces: 64 KiB
		p.skipSpace()
		if u, ok := lookupUnit(letters()); ok && p.delimAt(p.pos, ".)") {
			unit = u
		} else {
			p.pos = ustart
		}
	}
	// n = (whole.frac) * mult, which must be a whole number no larger than MaxInt64.
	v, _ := new(big.Int).SetString(whole+frac, 10)
	v.Mul(v, big.NewInt(units[unit].mult))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil)
	q, r := new(big.Int).QuoRem(v, den, new(big.Int))
	text := p.line[start:p.pos]
	switch {
	case r.Sign() != 0:
		return size{}, p.errAt(start, "size %s is not a whole number of bytes", text)
	case !q.IsInt64():
		return size{}, p.errAt(start, "size %s is too large", text)
	}
	return size{n: q.Int64(), unit: unit}, nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// quoted parses the quoted string at p.pos and returns its contents.
func (p *parser) quoted() (string, error) {
	start := p.pos
	p.pos++ // the opening quote
	var b strings.Builder
	for p.pos < len(p.line) {
		c := p.line[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c == '\\' && p.pos+1 < len(p.line) && (p.line[p.pos+1] == '"' || p.line[p.pos+1] == '\\'):
			b.WriteByte(p.line[p.pos+1])
			p.pos += 2
		default:
			b.WriteByte(c)
			p.pos++
		}
	}
	return "", p.errAt(start, "string not closed with \" before the end of the line")
}

// word scans an unquoted glob: everything up to a space, (, ), #, " or =>.
// A backslash takes the next character with it (the glob then reads it as a
// literal).
func (p *parser) word() string {
	start := p.pos
	for p.pos < len(p.line) {
		c := p.line[p.pos]
		if c == ' ' || c == '\t' || c == '(' || c == ')' || c == '#' || c == '"' ||
			strings.HasPrefix(p.line[p.pos:], "=>") {
			break
		}
		if c == '\\' && p.pos+1 < len(p.line) {
			_, w := utf8.DecodeRuneInString(p.line[p.pos+1:])
			p.pos += 1 + w
			continue
		}
		p.pos++
	}
	return p.line[start:p.pos]
}

// ident returns the lower-case letters at p.pos and where they end, without
// consuming them.
func (p *parser) ident() (string, int) {
	end := p.pos
	for end < len(p.line) && 'a' <= p.line[end] && p.line[end] <= 'z' {
		end++
	}
	return p.line[p.pos:end], end
}

// delimAt reports whether a keyword ending at i is complete: i is at the end of
// the line, at a space or comment, or at one of the bytes in also.
func (p *parser) delimAt(i int, also string) bool {
	if i >= len(p.line) {
		return true
	}
	c := p.line[i]
	return c == ' ' || c == '\t' || c == '#' || strings.IndexByte(also, c) >= 0
}

// skipSpace skips blanks.
func (p *parser) skipSpace() {
	for p.pos < len(p.line) && (p.line[p.pos] == ' ' || p.line[p.pos] == '\t') {
		p.pos++
	}
}

// eol reports whether the statement has ended: at the end of the line or at a
// comment.
func (p *parser) eol() bool { return p.pos >= len(p.line) || p.line[p.pos] == '#' }

// bareHint explains an unexpected token that follows a bare word: the word
// was taken for a glob, and the author probably misspelled a keyword.
func (p *parser) bareHint() string {
	if p.bare == "" || p.bareEnd > p.pos || strings.TrimSpace(p.line[p.bareEnd:p.pos]) != "" {
		return ""
	}
	for i := 0; i < len(p.bare); i++ {
		if !isLetter(p.bare[i]) {
			return ""
		}
	}
	return fmt.Sprintf(" (%q was read as a key glob; conditions start with key, type, size, not, ( or a glob)", p.bare)
}

// found describes what is at p.pos for an error message.
func (p *parser) found() string {
	if p.pos >= len(p.line) || p.line[p.pos] == '#' {
		return "end of line"
	}
	rest := p.line[p.pos:]
	if i := strings.IndexAny(rest, " \t"); i > 0 {
		rest = rest[:i]
	}
	if utf8.RuneCountInString(rest) > 24 {
		rest = string([]rune(rest)[:24]) + "..."
	}
	return fmt.Sprintf("%q", rest)
}
