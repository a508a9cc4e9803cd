package policy

import (
	"regexp"
	"strconv"
	"strings"
)

// input is an Object prepared once per Evaluate.
type input struct {
	key   string
	base  string // the key's last path element
	mtype string // the media type: content type without parameters, trimmed
	size  int64  // negative: unknown
}

// tri is a three-valued truth value; unknown comes from sizes that are not known.
type tri uint8

const (
	no tri = iota
	yes
	unknown
)

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

type condOp uint8

const (
	opAnd condOp = iota
	opOr
	opNot
	opKeyGlob
	opKeyRegex
	opTypeGlob
	opSizeCmp
	opSizeIn
	opSizeUnknown
)

type cmpOp uint8

const (
	cmpLT cmpOp = iota
	cmpLE
	cmpGT
	cmpGE
	cmpEQ
	cmpNE
)

var cmpNames = [...]string{cmpLT: "<", cmpLE: "<=", cmpGT: ">", cmpGE: ">=", cmpEQ: "=", cmpNE: "!="}

// A cond is a node of a condition tree.
type cond struct {
	op    condOp
	kids  []*cond        // opAnd, opOr (two or more), opNot (one)
	glob  *glob          // opKeyGlob, opTypeGlob
	re    *regexp.Regexp // opKeyRegex
	cmp   cmpOp          // opSizeCmp
	a, b  size           // opSizeCmp: a; opSizeIn: [a, b)
	reSrc string         // opKeyRegex: the expression as written
}

func (c *cond) eval(in *input) tri {
	switch c.op {
	case opAnd:
		v := yes
		for _, k := range c.kids {
			switch k.eval(in) {
			case no:
				return no
			case unknown:
				v = unknown
			}
		}
		return v
	case opOr:
		v := no
		for _, k := range c.kids {
			switch k.eval(in) {
			case yes:
				return yes
			case unknown:
				v = unknown
			}
		}
		return v
	case opNot:
		switch c.kids[0].eval(in) {
		case yes:
			return no
		case no:
			return yes
		}
		return unknown
	case opKeyGlob:
		return triOf(c.glob.matchKey(in.key, in.base))
	case opKeyRegex:
		return triOf(c.re.MatchString(in.key))
	case opTypeGlob:
		return triOf(c.glob.matchType(in.mtype))
	case opSizeCmp:
		if in.size < 0 {
			return unknown
		}
		s, n := in.size, c.a.n
		switch c.cmp {
		case cmpLT:
			return triOf(s < n)
		case cmpLE:
			return triOf(s <= n)
		case cmpGT:
			return triOf(s > n)
		case cmpGE:
			return triOf(s >= n)
		case cmpEQ:
			return triOf(s == n)
		default:
			return triOf(s != n)
		}
	case opSizeIn:
		if in.size < 0 {
			return unknown
		}
		return triOf(c.a.n <= in.size && in.size < c.b.n)
	case opSizeUnknown:
		return triOf(in.size < 0)
	}
	return no
}

// Operator precedence, loosest first, for printing.
const (
	precOr = iota
	precAnd
	precNot
)

// write prints c in canonical form; ctx is the precedence of the enclosing
// operator, and c is parenthesised when it binds more loosely.
func (c *cond) write(b *strings.Builder, ctx int) {
	switch c.op {
	case opOr, opAnd:
		prec, word := precOr, " or "
		if c.op == opAnd {
			prec, word = precAnd, " and "
		}
		if ctx > prec {
			b.WriteByte('(')
		}
		for i, k := range c.kids {
			if i > 0 {
				b.WriteString(word)
			}
			k.write(b, prec+1)
		}
		if ctx > prec {
			b.WriteByte(')')
		}
	case opNot:
		b.WriteString("not ")
		c.kids[0].write(b, precNot)
	case opKeyGlob:
		b.WriteString("key ")
		writeQuoted(b, c.glob.src)
	case opKeyRegex:
		b.WriteString("key ~ ")
		writeQuoted(b, c.reSrc)
	case opTypeGlob:
		b.WriteString("type ")
		writeQuoted(b, c.glob.src)
	case opSizeCmp:
		b.WriteString("size ")
		b.WriteString(cmpNames[c.cmp])
		b.WriteByte(' ')
		c.a.write(b)
	case opSizeIn:
		b.WriteString("size in ")
		c.a.write(b)
		b.WriteString("..")
		c.b.write(b)
	case opSizeUnknown:
		b.WriteString("size unknown")
	}
}

// writeQuoted writes s as a quoted string that the parser reads back as s.
// Inside quotes only \" and \\ are escapes and any other backslash stands for
// itself, so a backslash is doubled only where it precedes a quote or a
// backslash or ends the string; regular expressions keep their usual look.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			if i+1 == len(s) || s[i+1] == '"' || s[i+1] == '\\' {
				b.WriteString(`\\`)
			} else {
				b.WriteByte('\\')
			}
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// A size is a byte count together with the unit it was written in, so that
// String can print it the same way.
type size struct {
	n    int64
	unit uint8 // index into units
}

type unitDef struct {
	name string
	mult int64
}

// units lists the accepted units; index 0 is a bare number of bytes. Names
// are matched without regard to case and printed as here.
var units = [...]unitDef{
	{"", 1},
	{"B", 1},
	{"KB", 1e3}, {"KiB", 1 << 10},
	{"MB", 1e6}, {"MiB", 1 << 20},
	{"GB", 1e9}, {"GiB", 1 << 30},
	{"TB", 1e12}, {"TiB", 1 << 40},
}

const unitList = "B, KB, KiB, MB, MiB, GB, GiB, TB, TiB"

func lookupUnit(name string) (uint8, bool) {
	for i := 1; i < len(units); i++ {
		if strings.EqualFold(units[i].name, name) {
			return uint8(i), true
		}
	}
	return 0, false
}

// write prints the size in its unit, with as many decimals as it takes to be
// exact (bytes/unit always has a finite decimal expansion: every unit is a
// product of twos and fives).
func (s size) write(b *strings.Builder) {
	u := units[s.unit]
	b.WriteString(strconv.FormatInt(s.n/u.mult, 10))
	if r := s.n % u.mult; r != 0 {
		b.WriteByte('.')
		for r != 0 {
			r *= 10
			b.WriteByte(byte('0' + r/u.mult))
			r %= u.mult
		}
	}
	b.WriteString(u.name)
}
