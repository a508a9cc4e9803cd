package s3api

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"mime/multipart"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The parsing half of browser POST uploads (postobject.go serves them): the
// multipart/form-data fields that precede the file, and the policy document with its
// conditions. Nothing here does I/O beyond reading the form.

const (
	// maxPostFields bounds the bytes of the form fields before the file (names and values):
	// they are held in memory while the policy is checked.
	maxPostFields = 64 << 10
	// maxPostFieldCount bounds their number.
	maxPostFieldCount = 1000
)

var (
	errMalformedPOST = &apiError{"MalformedPOSTRequest", "The body of your POST request is not well-formed multipart/form-data.", 400}
	errPostTooLarge  = &apiError{"MaxPostPreDataLengthExceededError", "Your POST request fields preceding the upload file were too large.", 400}
	errPostNoFile    = &apiError{"InvalidArgument", "POST requires exactly one file upload per request.", 400}
)

// postForm is a POST upload form up to its file.
type postForm struct {
	// fields maps each field name, lower case (S3's names are case-insensitive), to its value.
	fields map[string]string
	// names are the field names as sent, in order.
	names []string
	// file is the file field's part, positioned at the start of its content; filename is
	// the name the browser gave the file.
	file     *multipart.Part
	filename string
}

// readPostForm reads the fields of a multipart/form-data body up to its file field, which
// S3 requires to be the last one (what follows it is ignored). The file's content is left
// unread in f.file.
func readPostForm(body io.Reader, boundary string) (*postForm, error) {
	// multipart reads through a 4 KiB buffer unless given a larger one: 64 KiB reads of the
	// connection take a tenth of the system calls for the file's bytes.
	mr := multipart.NewReader(bufio.NewReaderSize(body, 64<<10), boundary)
	f := &postForm{fields: make(map[string]string)}
	total := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil, errPostNoFile
		}
		if err != nil {
			return nil, errMalformedPOST
		}
		name := p.FormName()
		if name == "" {
			return nil, errMalformedPOST
		}
		lname := strings.ToLower(name)
		if lname == "file" {
			f.file, f.filename = p, p.FileName()
			return f, nil
		}
		v, err := io.ReadAll(io.LimitReader(p, int64(maxPostFields-total)+1))
		if err != nil {
			return nil, errMalformedPOST
		}
		total += len(name) + len(v)
		if total > maxPostFields || len(f.names) >= maxPostFieldCount {
			return nil, errPostTooLarge
		}
		if _, dup := f.fields[lname]; dup {
			return nil, errf(400, "InvalidArgument", "The form field %s is given more than once.", name)
		}
		f.fields[lname] = string(v)
		f.names = append(f.names, name)
	}
}

// postPolicy is a decoded POST policy document.
type postPolicy struct {
	expiration time.Time
	conds      []postCondition
	// minSize and maxSize are the content-length-range (the tightest, if several); without
	// one, 0 and math.MaxInt64.
	minSize, maxSize int64
}

// postCondition is one exact-match or starts-with condition.
type postCondition struct {
	op    string // "eq" or "starts-with"
	field string // lower case, without the '$'
	value string
	text  string // as the policy wrote it, for error messages
}

func errPolicy(format string, args ...any) *apiError {
	return errf(400, "InvalidPolicyDocument", "Invalid Policy: "+format, args...)
}

// parsePostPolicy decodes a policy document from its base64 form field. Errors are
// InvalidPolicyDocument.
func parsePostPolicy(b64 string) (*postPolicy, error) {
	doc, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errPolicy("Invalid 'policy' field: not base64.")
	}
	// The document's keys are case-sensitive: encoding/json would match "CONDITIONS" or
	// "Expiration" to the fields of a struct, so the top level is read as a map.
	var top map[string]json.RawMessage
	d := json.NewDecoder(bytes.NewReader(doc))
	if err := d.Decode(&top); err != nil {
		return nil, errPolicy("Invalid JSON.")
	}
	if d.More() {
		return nil, errPolicy("Invalid JSON.")
	}
	var raw struct {
		Expiration *string
		Conditions *[]json.RawMessage
	}
	for name, dst := range map[string]any{"expiration": &raw.Expiration, "conditions": &raw.Conditions} {
		if v, ok := top[name]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return nil, errPolicy("Invalid JSON.")
			}
		}
	}
	if raw.Expiration == nil {
		return nil, errPolicy("Policy missing expiration.")
	}
	if raw.Conditions == nil {
		return nil, errPolicy("Policy missing conditions.")
	}
	p := &postPolicy{maxSize: math.MaxInt64}
	p.expiration, err = time.Parse(time.RFC3339Nano, *raw.Expiration)
	if err != nil {
		return nil, errPolicy("Invalid 'expiration' value: '%s'", *raw.Expiration)
	}
	for _, c := range *raw.Conditions {
		if err := p.addCondition(c); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *postPolicy) addCondition(c json.RawMessage) error {
	c = bytes.TrimSpace(c)
	if len(c) > 0 && c[0] == '{' {
		// {"field": "value", ...}: exact matches.
		var m map[string]any
		if json.Unmarshal(c, &m) != nil || len(m) == 0 {
			return errPolicy("Invalid Simple-Condition: %s", c)
		}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return errPolicy("Invalid Simple-Condition: value must be a string.")
			}
			text, _ := json.Marshal(map[string]string{k: s})
			p.conds = append(p.conds, postCondition{op: "eq", field: strings.ToLower(strings.TrimPrefix(k, "$")), value: s, text: string(text)})
		}
		return nil
	}
	var list []any
	d := json.NewDecoder(bytes.NewReader(c))
	d.UseNumber()
	if d.Decode(&list) != nil || len(list) != 3 {
		return errPolicy("Invalid Condition: %s", c)
	}
	op, _ := list[0].(string)
	switch strings.ToLower(op) {
	case "content-length-range":
		lo, ok1 := policyInt(list[1])
		hi, ok2 := policyInt(list[2])
		if !ok1 || !ok2 || lo < 0 || hi < lo {
			return errPolicy("Invalid content-length-range: %s", c)
		}
		p.minSize = max(p.minSize, lo)
		p.maxSize = min(p.maxSize, hi)
		return nil
	case "eq", "starts-with":
		field, ok1 := list[1].(string)
		value, ok2 := list[2].(string)
		if !ok1 || !ok2 || !strings.HasPrefix(field, "$") || len(field) < 2 {
			return errPolicy("Invalid Condition: %s", c)
		}
		text, _ := json.Marshal([]string{strings.ToLower(op), field, value})
		p.conds = append(p.conds, postCondition{op: strings.ToLower(op), field: strings.ToLower(field[1:]), value: value, text: string(text)})
		return nil
	}
	return errPolicy("Invalid Condition: unknown operation %q.", op)
}

// policyInt reads a content-length-range bound: a JSON integer or a string of one.
func policyInt(v any) (int64, bool) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// postExempt reports whether a form field needs no policy condition: the signature and
// the policy themselves, the file, and the x-ignore- fields.
func postExempt(lname string) bool {
	switch lname {
	case "policy", "x-amz-signature", "awsaccesskeyid", "signature", "file":
		return true
	}
	return strings.HasPrefix(lname, "x-ignore-")
}

func errPolicyDenied(msg string) *apiError {
	return &apiError{"AccessDenied", "Invalid according to Policy: " + msg, 403}
}

// check applies the policy to the form fields (lower-case names, values as sent) of an upload to bucket at now: the expiration, every condition,
// and that every field but the exempt ones is named by some condition. The
// content-length-range is the caller's to apply while the file streams.
func (p *postPolicy) check(fields map[string]string, bucket string, now time.Time) error {
	if !now.Before(p.expiration) {
		return errPolicyDenied("Policy expired.")
	}
	covered := make(map[string]bool, len(p.conds))
	for _, c := range p.conds {
		covered[c.field] = true
		v, ok := fields[c.field]
		if c.field == "bucket" {
			v, ok = bucket, true
		}
		if !ok {
			v = ""
		}
		if !c.holds(v) {
			return errPolicyDenied("Policy Condition failed: " + c.text)
		}
	}
	var extra []string
	for name := range fields {
		if !covered[name] && !postExempt(name) {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return errPolicyDenied("Extra input fields: " + strings.Join(extra, ", "))
	}
	return nil
}

// holds reports whether value satisfies the condition. A starts-with on Content-Type
// applies to each of a comma-separated list of types, as S3 does.
func (c *postCondition) holds(value string) bool {
	if c.op == "eq" {
		return value == c.value
	}
	if c.field == "content-type" && strings.Contains(value, ",") {
		for v := range strings.SplitSeq(value, ",") {
			if !strings.HasPrefix(strings.TrimSpace(v), c.value) {
				return false
			}
		}
		return true
	}
	return strings.HasPrefix(value, c.value)
}
