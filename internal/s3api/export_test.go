package s3api

import "net/http"

// FeatureEntry is one line of the refusal table, as tests see it.
type FeatureEntry struct {
	Header bool   // a request header; else a query parameter
	Name   string // canonical header name (a prefix ends in '*') or query parameter
	Only   []string
	Code   string // the refusal's S3 code; "" where the entry is ignored outside its operations
	Status int
	Ops    string // the operations that honour it, as in the table
	Doc    string
	mask   opMask
}

// Features returns the refusal table.
func Features() []FeatureEntry {
	var out []FeatureEntry
	add := func(r *rule) {
		e := FeatureEntry{Header: r.kind == header, Name: r.name, Only: r.values, Ops: r.ops, Doc: r.doc, mask: r.mask}
		if r.err != nil {
			e.Code, e.Status = r.err.Code, r.err.Status
		}
		out = append(out, e)
	}
	for i := range features {
		f := &features[i]
		if f.kind == query {
			add(queryRules[f.name])
		} else if r := headerRules[f.name]; r != nil {
			add(r)
		} else {
			for _, p := range prefixRules {
				if p.feature == f {
					add(p)
				}
			}
		}
	}
	return out
}

// Honours reports whether the entry is honoured, with value, in operation op.
func (e FeatureEntry) Honours(op, value string) bool {
	if !e.mask.has(opBits[op]) {
		return false
	}
	return e.Only == nil || oneOf(e.Only, value)
}

// OperationOf names the S3 operation of a path-style request.
func OperationOf(r *http.Request) string {
	h := &Handler{}
	b, k := h.bucketAndKey(r)
	return operation(r, b, k)
}

// CheckFeatures is checkFeatures, for benchmarks.
var CheckFeatures = checkFeatures
