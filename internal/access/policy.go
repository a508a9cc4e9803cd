// Package access parses S3 bucket policies and evaluates requests against them: the
// subset of the IAM policy language that bucket policies use (Effect, Principal, Action
// and NotAction, Resource and NotResource with wildcards, Condition with the string,
// numeric, date, boolean, IP address and null operators, policy variables such as
// ${aws:username}). An explicit Deny wins over any Allow; a request no statement matches
// is decided by the caller (a bucket's owner and grants, package s3api).
//
// What the language has and cairn does not (NotPrincipal, the ForAnyValue/ForAllValues
// set operators, ARN operators, principals other than users) is refused when the policy
// is set, never accepted and ignored.
package access

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// MaxPolicySize is S3's limit on a bucket policy document.
const MaxPolicySize = 20 << 10

// Decision is the outcome of evaluating a request.
type Decision int

const (
	// NoMatch: no statement applies; the caller decides.
	NoMatch Decision = iota
	// Allow: a statement allows the request and none denies it.
	Allow
	// Deny: a statement denies the request.
	Deny
)

func (d Decision) String() string {
	return [...]string{"no match", "allow", "deny"}[d]
}

// Policy is a parsed bucket policy.
type Policy struct {
	Version    string
	statements []statement
	vars       bool // policy variables are expanded (Version 2012-10-17)
}

type statement struct {
	sid         string
	deny        bool
	anyone      bool     // Principal "*"
	users       []string // Principal user names
	actions     []string // lower case patterns
	notAction   bool
	resources   []string // patterns
	notResource bool
	conditions  []condition
	public      bool // grants to anyone without a condition that narrows who
}

type condition struct {
	op       string // the operator without IfExists
	ifExists bool
	key      string // lower case
	values   []string
}

// Error is a policy that does not parse or is not valid for its bucket: S3's
// MalformedPolicy, or NotImplemented for a part of the language cairn does not do.
type Error struct {
	NotImplemented bool
	Msg            string
}

func (e *Error) Error() string { return e.Msg }

func malformed(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

func unsupported(format string, args ...any) error {
	return &Error{NotImplemented: true, Msg: fmt.Sprintf(format, args...)}
}

// oneOrMany decodes a JSON string or array of strings.
type oneOrMany []string

func (o *oneOrMany) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var s []string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*o = s
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*o = []string{s}
	return nil
}

type rawStatement struct {
	Sid          string                                `json:"Sid"`
	Effect       string                                `json:"Effect"`
	Principal    json.RawMessage                       `json:"Principal"`
	NotPrincipal json.RawMessage                       `json:"NotPrincipal"`
	Action       *oneOrMany                            `json:"Action"`
	NotAction    *oneOrMany                            `json:"NotAction"`
	Resource     *oneOrMany                            `json:"Resource"`
	NotResource  *oneOrMany                            `json:"NotResource"`
	Condition    map[string]map[string]json.RawMessage `json:"Condition"`
}

// Parse parses a bucket policy for bucket. Every Resource must be in the bucket (the
// bucket's ARN or its objects').
func Parse(doc []byte, bucket string) (*Policy, error) {
	if len(doc) > MaxPolicySize {
		return nil, malformed("Policies must be smaller than %d bytes", MaxPolicySize)
	}
	var raw struct {
		Version   string          `json:"Version"`
		ID        string          `json:"Id"`
		Statement json.RawMessage `json:"Statement"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, malformed("This policy contains invalid Json: %v", err)
	}
	p := &Policy{Version: raw.Version}
	switch raw.Version {
	case "2012-10-17":
		p.vars = true
	case "2008-10-17", "":
	default:
		return nil, malformed("Invalid policy version %q: use 2012-10-17", raw.Version)
	}
	var stmts []rawStatement
	s := bytes.TrimSpace(raw.Statement)
	if len(s) > 0 && s[0] == '{' {
		var one rawStatement
		if err := strictUnmarshal(s, &one); err != nil {
			return nil, malformed("This policy contains invalid Json: %v", err)
		}
		stmts = []rawStatement{one}
	} else if err := strictUnmarshal(s, &stmts); err != nil {
		return nil, malformed("This policy contains invalid Json: %v", err)
	}
	if len(stmts) == 0 {
		return nil, malformed("Missing required field Statement")
	}
	for i, rs := range stmts {
		st, err := parseStatement(rs, bucket)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) {
				pe.Msg = fmt.Sprintf("Statement %d: %s", i+1, pe.Msg)
			}
			return nil, err
		}
		p.statements = append(p.statements, st)
	}
	return p, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func parseStatement(rs rawStatement, bucket string) (statement, error) {
	var st statement
	st.sid = rs.Sid
	switch rs.Effect {
	case "Allow":
	case "Deny":
		st.deny = true
	default:
		return st, malformed("Invalid effect %q (Allow or Deny)", rs.Effect)
	}
	if rs.NotPrincipal != nil {
		return st, unsupported("NotPrincipal is not supported")
	}
	if rs.Principal == nil {
		return st, malformed("Missing required field Principal")
	}
	if err := parsePrincipal(rs.Principal, &st); err != nil {
		return st, err
	}
	switch {
	case rs.Action != nil && rs.NotAction != nil, rs.Action == nil && rs.NotAction == nil:
		return st, malformed("A statement has one of Action and NotAction")
	case rs.Action != nil:
		st.actions = *rs.Action
	default:
		st.actions, st.notAction = *rs.NotAction, true
	}
	if len(st.actions) == 0 {
		return st, malformed("Action is empty")
	}
	for i, a := range st.actions {
		a = strings.ToLower(a)
		if a != "*" && !strings.HasPrefix(a, "s3:") {
			return st, malformed("Policy has invalid action %q", st.actions[i])
		}
		st.actions[i] = a
	}
	switch {
	case rs.Resource != nil && rs.NotResource != nil, rs.Resource == nil && rs.NotResource == nil:
		return st, malformed("A statement has one of Resource and NotResource")
	case rs.Resource != nil:
		st.resources = *rs.Resource
	default:
		st.resources, st.notResource = *rs.NotResource, true
	}
	if len(st.resources) == 0 {
		return st, malformed("Resource is empty")
	}
	for _, r := range st.resources {
		rest, ok := strings.CutPrefix(r, "arn:aws:s3:::")
		if !ok && r != "*" {
			return st, malformed("Policy has invalid resource %q", r)
		}
		b, _, _ := strings.Cut(rest, "/")
		if r != "*" && !wildMatch(b, bucket, false) {
			return st, malformed("Policy has invalid resource %q: not in bucket %s", r, bucket)
		}
	}
	for op, kv := range rs.Condition {
		base, ifExists := strings.CutSuffix(op, "IfExists")
		if strings.HasPrefix(op, "ForAnyValue:") || strings.HasPrefix(op, "ForAllValues:") {
			return st, unsupported("Condition operator %s is not supported", op)
		}
		if !knownOperator(base) || (base == "Null" && ifExists) {
			return st, malformed("Invalid Condition type : %s", op)
		}
		for key, raw := range kv {
			var vals oneOrMany
			if err := vals.UnmarshalJSON(raw); err != nil {
				// Booleans and numbers are written without quotes too.
				var many []any
				var one any
				if json.Unmarshal(raw, &many) == nil {
					for _, v := range many {
						vals = append(vals, fmt.Sprint(v))
					}
				} else if json.Unmarshal(raw, &one) == nil && one != nil {
					vals = oneOrMany{fmt.Sprint(one)}
				} else {
					return st, malformed("Invalid value for condition %s %s", op, key)
				}
			}
			c := condition{op: base, ifExists: ifExists, key: conditionKey(key), values: vals}
			if err := checkCondition(c); err != nil {
				return st, err
			}
			st.conditions = append(st.conditions, c)
		}
	}
	// Deterministic order (maps of conditions have none).
	slices.SortFunc(st.conditions, func(a, b condition) int {
		if c := strings.Compare(a.op, b.op); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	st.public = st.anyone && !st.deny
	for _, c := range st.conditions {
		switch c.key {
		case "aws:sourceip", "aws:username", "aws:userid", "aws:principaltype":
			st.public = false // who may is narrowed
		}
	}
	return st, nil
}

func parsePrincipal(raw json.RawMessage, st *statement) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "*" {
			return malformed("Invalid principal %q", s)
		}
		st.anyone = true
		return nil
	}
	var m map[string]oneOrMany
	if err := json.Unmarshal(raw, &m); err != nil {
		return malformed("Invalid principal in policy")
	}
	for kind, vals := range m {
		if kind != "AWS" {
			return unsupported("Principal %s is not supported (only AWS: users of the cluster, or *)", kind)
		}
		for _, v := range vals {
			switch {
			case v == "*":
				st.anyone = true
			case strings.HasPrefix(v, "arn:aws:iam::"):
				rest := strings.TrimPrefix(v, "arn:aws:iam::")
				_, res, ok := strings.Cut(rest, ":")
				if !ok {
					return malformed("Invalid principal %q", v)
				}
				switch {
				case res == "root":
					st.users = append(st.users, "root")
				case strings.HasPrefix(res, "user/") && len(res) > 5:
					name := res[strings.LastIndexByte(res, '/')+1:]
					st.users = append(st.users, name)
				default:
					return unsupported("Principal %q is not supported (a user: arn:aws:iam::ACCOUNT:user/NAME)", v)
				}
			default:
				return malformed("Invalid principal %q (a user's ARN, arn:aws:iam::ACCOUNT:user/NAME, or *)", v)
			}
		}
	}
	if !st.anyone && len(st.users) == 0 {
		return malformed("Invalid principal in policy")
	}
	return nil
}

func knownOperator(op string) bool {
	switch op {
	case "StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase",
		"StringLike", "StringNotLike",
		"NumericEquals", "NumericNotEquals", "NumericLessThan", "NumericLessThanEquals",
		"NumericGreaterThan", "NumericGreaterThanEquals",
		"DateEquals", "DateNotEquals", "DateLessThan", "DateLessThanEquals", "DateGreaterThan", "DateGreaterThanEquals",
		"Bool", "IpAddress", "NotIpAddress", "Null":
		return true
	}
	return false
}

// checkCondition checks the values of a condition parse for its operator.
// conditionKey is a condition key as Request.Context is asked for it: its name in lower
// case (names are case-insensitive), and what follows a '/' as written: the tag key of
// s3:ExistingObjectTag/KEY (tag keys are case-sensitive).
func conditionKey(k string) string {
	name, rest, found := strings.Cut(k, "/")
	if !found {
		return strings.ToLower(k)
	}
	return strings.ToLower(name) + "/" + rest
}

func checkCondition(c condition) error {
	for _, v := range c.values {
		var err error
		switch {
		case strings.HasPrefix(c.op, "Numeric"):
			_, err = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(c.op, "Date"):
			_, err = parseDate(v)
		case c.op == "Bool", c.op == "Null":
			if v != "true" && v != "false" {
				err = fmt.Errorf("want true or false")
			}
		case c.op == "IpAddress", c.op == "NotIpAddress":
			_, err = parseCIDR(v)
		}
		if err != nil {
			return malformed("Invalid value %q for condition %s %s", v, c.op, c.key)
		}
	}
	return nil
}

func parseDate(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	n, err := strconv.ParseInt(v, 10, 64) // epoch seconds
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, 0), nil
}

func parseCIDR(v string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// IsPublic reports whether the policy allows anyone (anonymous requests included) to do
// something, with no condition narrowing who: GetBucketPolicyStatus's IsPublic, and what
// Block Public Access refuses.
func (p *Policy) IsPublic() bool {
	for _, st := range p.statements {
		if st.public {
			return true
		}
	}
	return false
}

// Request is what a policy is evaluated against.
type Request struct {
	// User is who signed the request ("" for an anonymous request).
	User string
	// Action is the S3 action ("s3:GetObject").
	Action string
	// Resource is the ARN the action is on: arn:aws:s3:::bucket or arn:aws:s3:::bucket/key.
	Resource string
	// Context gives the condition keys' values (lower-case names: "aws:sourceip"; the
	// part after a '/' keeps its case: "s3:existingobjecttag/Security").
	Context func(key string) (string, bool)
}

// Evaluate decides req: Deny if a statement that applies denies it, else Allow if one
// allows it, else NoMatch. ignorePublic makes statements that allow anyone not count
// (Block Public Access's RestrictPublicBuckets) for requests of others than the owner.
func (p *Policy) Evaluate(req *Request, ignorePublic bool) Decision {
	d := NoMatch
	action := strings.ToLower(req.Action)
	for i := range p.statements {
		st := &p.statements[i]
		if d == Allow && !st.deny {
			continue
		}
		if ignorePublic && st.public {
			continue
		}
		if !st.matches(p, req, action) {
			continue
		}
		if st.deny {
			return Deny
		}
		d = Allow
	}
	return d
}

func (st *statement) matches(p *Policy, req *Request, action string) bool {
	if !st.anyone && (req.User == "" || !slices.Contains(st.users, req.User)) {
		return false
	}
	hit := false
	for _, a := range st.actions {
		if wildMatch(a, action, false) {
			hit = true
			break
		}
	}
	if hit == st.notAction {
		return false
	}
	hit = false
	for _, r := range st.resources {
		if p.vars {
			r = expand(r, req)
		}
		if r == "*" || wildMatch(r, req.Resource, false) {
			hit = true
			break
		}
	}
	if hit == st.notResource {
		return false
	}
	for _, c := range st.conditions {
		if !c.holds(p, req) {
			return false
		}
	}
	return true
}

// expand replaces the policy variables of s: ${aws:username} and the other condition
// keys, and the escapes ${*}, ${?} and ${$}. A variable without a value leaves the
// whole string unmatched (AWS: the statement does not apply).
func expand(s string, req *Request) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		name := s[i+2 : i+j]
		switch name {
		case "*", "?", "$":
			b.WriteString("\x00" + name) // a literal, not a wildcard: see wildMatch
		default:
			v, ok := contextValue(req, strings.ToLower(name))
			if !ok {
				return "\x00unmatched"
			}
			b.WriteString(escapeWild(v))
		}
		s = s[i+j+1:]
	}
}

// escapeWild marks the wildcard characters of a variable's value as literals.
func escapeWild(v string) string {
	if !strings.ContainsAny(v, "*?") {
		return v
	}
	v = strings.ReplaceAll(v, "*", "\x00*")
	return strings.ReplaceAll(v, "?", "\x00?")
}

func contextValue(req *Request, key string) (string, bool) {
	if key == "aws:username" {
		return req.User, req.User != ""
	}
	if req.Context == nil {
		return "", false
	}
	return req.Context(key)
}

// wildMatch matches s against pattern, in which * matches any run of characters and ?
// any one character, and "\x00" before either makes it literal.
func wildMatch(pattern, s string, fold bool) bool {
	if fold {
		pattern, s = strings.ToLower(pattern), strings.ToLower(s)
	}
	// Iterative matching with backtracking to the last star.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == 0 && p+1 < len(pattern) && pattern[p+1] == s[i]:
			p += 2
			i++
		case p < len(pattern) && pattern[p] == '?':
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] != 0 && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func (c condition) holds(p *Policy, req *Request) bool {
	v, ok := contextValue(req, c.key)
	if c.op == "Null" {
		want := c.values[0] == "true" // "true": the key is absent
		return want == !ok
	}
	negated := strings.Contains(c.op, "Not")
	if !ok {
		// A key the request does not have: IfExists makes the condition hold; negated
		// operators hold; the others do not.
		return c.ifExists || negated
	}
	hit := false
	for _, want := range c.values {
		if p.vars {
			want = expand(want, req)
		}
		if c.match(want, v) {
			hit = true
			break
		}
	}
	if negated {
		return !hit
	}
	return hit
}

// match compares the request's value v with one policy value (for the negated operators,
// whether they are equal or match: holds negates).
func (c condition) match(want, v string) bool {
	switch c.op {
	case "StringEquals", "StringNotEquals":
		return strings.ReplaceAll(want, "\x00", "") == v
	case "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase":
		return strings.EqualFold(strings.ReplaceAll(want, "\x00", ""), v)
	case "StringLike", "StringNotLike":
		return wildMatch(want, v, false)
	case "Bool":
		return strings.EqualFold(want, v)
	case "IpAddress", "NotIpAddress":
		pfx, err := parseCIDR(want)
		a, aerr := netip.ParseAddr(v)
		return err == nil && aerr == nil && pfx.Contains(a.Unmap())
	}
	if strings.HasPrefix(c.op, "Numeric") {
		w, err1 := strconv.ParseFloat(want, 64)
		x, err2 := strconv.ParseFloat(v, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		return compare(c.op, "Numeric", x, w)
	}
	if strings.HasPrefix(c.op, "Date") {
		w, err1 := parseDate(want)
		x, err2 := parseDate(v)
		if err1 != nil || err2 != nil {
			return false
		}
		return compare(c.op, "Date", float64(x.UnixNano()), float64(w.UnixNano()))
	}
	return false
}

func compare(op, family string, x, w float64) bool {
	switch strings.TrimPrefix(op, family) {
	case "Equals", "NotEquals":
		return x == w
	case "LessThan":
		return x < w
	case "LessThanEquals":
		return x <= w
	case "GreaterThan":
		return x > w
	case "GreaterThanEquals":
		return x >= w
	}
	return false
}
