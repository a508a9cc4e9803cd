// Package policy implements per-bucket placement policies: ordered rules that
// choose the storage class of each new object from its key, size and content
// type, in the manner of AFS/OSD's per-file policies (DESIGN.md §7).
//
// A policy is a small text file, one rule per line:
//
//	# photos platform
//	default STANDARD
//	*.root => EC42
//	size < 64KiB => STANDARD stop
//	key ~ "^logs/[0-9]{4}/.*\.gz$" and size >= 1MiB => EC83
//	type "image/*" or key "*.jpg" => EC42 continue
//	not (size <= 1GiB) => EC83
//
// Parse compiles it; Evaluate picks the class for one object without
// allocating. The grammar and the matching rules are documented in
// docs/design/20261123_policy.md and on Parse.
//
// The package is pure computation: it does not know the cluster map, so class
// names are only checked for syntax here; the caller checks that every name
// in Classes exists. A *Policy is immutable and safe for concurrent use.
package policy

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// Object describes the object being written, as far as a policy can see it.
type Object struct {
	Key         string // the object key, without the bucket
	Size        int64  // in bytes; negative when not known (see Evaluate)
	ContentType string // the Content-Type header, parameters allowed
}

// Policy is a parsed placement policy: an ordered list of rules and an
// optional default class. The zero value and the nil *Policy are valid
// policies with no rules and no default.
type Policy struct {
	src   string // the text it was parsed from
	def   string // default class, "" if none
	rules []rule
}

type rule struct {
	cond  *cond
	class string
	cont  bool // continue rather than stop
	line  int  // in src, for messages
}

// Evaluate returns the storage class for o and the index of the rule that
// decided it.
//
// Rules are tried in order. A rule whose condition holds sets the class; if
// its action is stop (the default) evaluation ends there, if it is continue
// the following rules are still tried and a later matching rule overrides
// the class. rule is the index of the last matching rule. If no rule
// matches, Evaluate returns the policy's default class and -1, or "" and -1
// if the policy has no default (the caller then uses the cluster's default
// class).
//
// A negative o.Size means the size is not known yet (a multipart upload, or a
// streaming upload without a length). Size comparisons are then neither true
// nor false but unknown, and unknown propagates as in SQL: not unknown is
// unknown, false and unknown is false, true or unknown is true. A rule
// matches only when its condition is true, so "size >= 1GiB" and
// "not size < 1GiB" both fail to match an object of unknown size. Use
// "size unknown" to route such objects explicitly.
//
// The content type is compared without its parameters ("text/plain;
// charset=utf-8" is "text/plain") and without regard to ASCII case.
//
// Evaluate does not allocate.
func (p *Policy) Evaluate(o Object) (class string, rule int) {
	if p == nil {
		return "", -1
	}
	in := input{key: o.Key, size: o.Size}
	in.base = o.Key[strings.LastIndexByte(o.Key, '/')+1:]
	mt := o.ContentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	in.mtype = strings.TrimSpace(mt)

	class, rule = "", -1
	for i := range p.rules {
		r := &p.rules[i]
		if r.cond.eval(&in) != yes {
			continue
		}
		class, rule = r.class, i
		if !r.cont {
			return class, rule
		}
	}
	if rule >= 0 {
		return class, rule
	}
	return p.def, -1
}

// Len returns the number of rules, not counting the default.
func (p *Policy) Len() int {
	if p == nil {
		return 0
	}
	return len(p.rules)
}

// Default returns the default class, or "" if the policy has none.
func (p *Policy) Default() string {
	if p == nil {
		return ""
	}
	return p.def
}

// Classes returns every class name the policy mentions, the default included,
// sorted and without duplicates.
func (p *Policy) Classes() []string {
	if p == nil {
		return nil
	}
	var cs []string
	if p.def != "" {
		cs = append(cs, p.def)
	}
	for _, r := range p.rules {
		cs = append(cs, r.class)
	}
	slices.Sort(cs)
	return slices.Compact(cs)
}

// Rule returns rule i in canonical form, as String writes it, for messages such
// as "class EC42 chosen by rule 3: key \"*.root\" => EC42". It panics if i is
// out of range.
func (p *Policy) Rule(i int) string {
	var b strings.Builder
	p.rules[i].write(&b)
	return b.String()
}

// Line returns the line of the source text that rule i was read from, counting
// from 1. It panics if i is out of range.
func (p *Policy) Line(i int) int { return p.rules[i].line }

// String returns the policy in canonical form: the default first, then one rule
// per line, every glob and regular expression quoted, every condition spelled
// out ("*.root" becomes key "*.root"), redundant parentheses removed, the stop
// action left implicit. Comments and blank lines are not kept (see Source).
// Parse accepts the result and yields an equivalent policy whose String is the
// same text.
func (p *Policy) String() string {
	if p == nil {
		return ""
	}
	var b strings.Builder
	if p.def != "" {
		b.WriteString("default ")
		b.WriteString(p.def)
		b.WriteByte('\n')
	}
	for i := range p.rules {
		p.rules[i].write(&b)
		b.WriteByte('\n')
	}
	return b.String()
}

// Source returns the text the policy was parsed from, comments and layout
// included.
func (p *Policy) Source() string {
	if p == nil {
		return ""
	}
	return p.src
}

// MarshalJSON encodes the policy as a JSON string holding its source text, so
// that the operator's comments survive a round trip through the cluster map.
// A policy that was not parsed from text is encoded as its canonical form.
func (p Policy) MarshalJSON() ([]byte, error) {
	src := p.src
	if src == "" {
		src = p.String()
	}
	return json.Marshal(src)
}

// UnmarshalJSON decodes a JSON string with Parse. JSON null yields the empty
// policy.
func (p *Policy) UnmarshalJSON(data []byte) error {
	const op errors.Op = "policy.UnmarshalJSON"
	if string(data) == "null" {
		*p = Policy{}
		return nil
	}
	var src string
	if err := json.Unmarshal(data, &src); err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	np, err := Parse([]byte(src))
	if err != nil {
		return err
	}
	*p = *np
	return nil
}

func (r *rule) write(b *strings.Builder) {
	r.cond.write(b, precOr)
	b.WriteString(" => ")
	b.WriteString(r.class)
	if r.cont {
		b.WriteString(" continue")
	}
}
