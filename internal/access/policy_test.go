package access

import (
	"errors"
	"strings"
	"testing"
)

func ctx(kv ...string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

// The policies are the S3 documentation's bucket policy examples (adapted to the bucket
// "doc" and to users of the cluster), each with requests it must decide.
func TestEvaluate(t *testing.T) {
	type check struct {
		req  Request
		want Decision
	}
	obj := func(k string) string { return "arn:aws:s3:::doc/" + k }
	const bucketARN = "arn:aws:s3:::doc"
	for _, tc := range []struct {
		name   string
		policy string
		public bool
		checks []check
	}{
		{"public read of objects", `{"Version":"2012-10-17","Statement":[{"Sid":"PublicRead","Effect":"Allow","Principal":"*","Action":["s3:GetObject","s3:GetObjectVersion"],"Resource":["arn:aws:s3:::doc/*"]}]}`, true, []check{
			{Request{Action: "s3:GetObject", Resource: obj("a.jpg")}, Allow},
			{Request{User: "alice", Action: "s3:GetObject", Resource: obj("a.jpg")}, Allow},
			{Request{Action: "s3:PutObject", Resource: obj("a.jpg")}, NoMatch},
			{Request{Action: "s3:ListBucket", Resource: bucketARN}, NoMatch},
		}},
		{"HTTPS only", `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::doc","arn:aws:s3:::doc/*"],"Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}`, false, []check{
			{Request{User: "alice", Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:securetransport", "false")}, Deny},
			{Request{User: "alice", Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:securetransport", "true")}, NoMatch},
			{Request{User: "alice", Action: "s3:ListBucket", Resource: bucketARN, Context: ctx("aws:securetransport", "false")}, Deny},
		}},
		{"deny outside an address range", `{"Version":"2012-10-17","Id":"S3PolicyId1","Statement":[{"Sid":"IPAllow","Effect":"Deny","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::doc","arn:aws:s3:::doc/*"],"Condition":{"NotIpAddress":{"aws:SourceIp":["192.0.2.0/24","2001:db8::/32"]}}}]}`, false, []check{
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k"), Context: ctx("aws:sourceip", "198.51.100.7")}, Deny},
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k"), Context: ctx("aws:sourceip", "192.0.2.9")}, NoMatch},
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k"), Context: ctx("aws:sourceip", "2001:db8::1")}, NoMatch},
		}},
		{"allow from an address range", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}]}`, false, []check{
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:sourceip", "10.1.2.3")}, Allow},
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:sourceip", "11.1.2.3")}, NoMatch},
		}},
		{"a home prefix per user", `{"Version":"2012-10-17","Statement":[
			{"Sid":"List","Effect":"Allow","Principal":{"AWS":["arn:aws:iam::111122223333:user/alice","arn:aws:iam::111122223333:user/bob"]},"Action":"s3:ListBucket","Resource":"arn:aws:s3:::doc","Condition":{"StringLike":{"s3:prefix":["home/${aws:username}/*","home/${aws:username}/"]}}},
			{"Sid":"Objects","Effect":"Allow","Principal":{"AWS":["arn:aws:iam::111122223333:user/alice","arn:aws:iam::111122223333:user/bob"]},"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":"arn:aws:s3:::doc/home/${aws:username}/*"}]}`, false, []check{
			{Request{User: "alice", Action: "s3:PutObject", Resource: obj("home/alice/x")}, Allow},
			{Request{User: "alice", Action: "s3:PutObject", Resource: obj("home/bob/x")}, NoMatch},
			{Request{User: "bob", Action: "s3:GetObject", Resource: obj("home/bob/deep/y")}, Allow},
			{Request{User: "carol", Action: "s3:GetObject", Resource: obj("home/carol/y")}, NoMatch},
			{Request{Action: "s3:GetObject", Resource: obj("home//y")}, NoMatch},
			{Request{User: "alice", Action: "s3:ListBucket", Resource: bucketARN, Context: ctx("s3:prefix", "home/alice/")}, Allow},
			{Request{User: "alice", Action: "s3:ListBucket", Resource: bucketARN, Context: ctx("s3:prefix", "home/")}, NoMatch},
			{Request{User: "alice", Action: "s3:ListBucket", Resource: bucketARN}, NoMatch},
		}},
		{"explicit deny beats allow", `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::doc/*"},
			{"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::1:user/mallory"},"Action":"s3:*","Resource":"arn:aws:s3:::doc/*"}]}`, true, []check{
			{Request{User: "alice", Action: "s3:DeleteObject", Resource: obj("k")}, Allow},
			{Request{User: "mallory", Action: "s3:GetObject", Resource: obj("k")}, Deny},
			{Request{User: "mallory", Action: "s3:ListBucket", Resource: bucketARN}, NoMatch},
		}},
		{"NotAction and NotResource", `{"Version":"2012-10-17","Statement":[
			{"Effect":"Deny","Principal":"*","NotAction":["s3:Get*","s3:List*"],"Resource":"arn:aws:s3:::doc/*"},
			{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","NotResource":"arn:aws:s3:::doc/private/*"}]}`, true, []check{
			{Request{User: "alice", Action: "s3:PutObject", Resource: obj("k")}, Deny},
			{Request{User: "alice", Action: "s3:GetObject", Resource: obj("k")}, Allow},
			{Request{User: "alice", Action: "S3:GETOBJECT", Resource: obj("k")}, Allow},
			{Request{User: "alice", Action: "s3:GetObject", Resource: obj("private/k")}, NoMatch},
		}},
		{"until a date", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"DateLessThan":{"aws:CurrentTime":"2027-01-01T00:00:00Z"},"NumericLessThanEquals":{"s3:max-keys":"10"}}}]}`, true, []check{
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:currenttime", "2026-11-27T10:00:00Z", "s3:max-keys", "5")}, Allow},
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:currenttime", "2027-02-01T10:00:00Z", "s3:max-keys", "5")}, NoMatch},
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("aws:currenttime", "2026-11-27T10:00:00Z", "s3:max-keys", "50")}, NoMatch},
		}},
		{"canned ACL required", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/bob"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::doc/*","Condition":{"StringEquals":{"s3:x-amz-acl":"bucket-owner-full-control"}}},
			{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::doc/*","Condition":{"Null":{"s3:x-amz-acl":"true"}}}]}`, false, []check{
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k"), Context: ctx("s3:x-amz-acl", "bucket-owner-full-control")}, Allow},
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k")}, Deny},
			{Request{User: "bob", Action: "s3:PutObject", Resource: obj("k"), Context: ctx("s3:x-amz-acl", "private")}, NoMatch},
		}},
		{"object tags: the condition's name folds, its tag key does not", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"StringEquals":{"S3:ExistingObjectTag/Security":"public"}}}]}`, true, []check{
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("s3:existingobjecttag/Security", "public")}, Allow},
			{Request{Action: "s3:GetObject", Resource: obj("k"), Context: ctx("s3:existingobjecttag/security", "public")}, NoMatch},
			{Request{Action: "s3:GetObject", Resource: obj("k")}, NoMatch},
		}},
		{"wildcards are literal in variables", `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/${aws:username}/${*}x"}]}`, true, []check{
			{Request{User: "a", Action: "s3:GetObject", Resource: obj("a/*x")}, Allow},
			{Request{User: "a", Action: "s3:GetObject", Resource: obj("a/yx")}, NoMatch},
		}},
		{"2008 policies have no variables", `{"Version":"2008-10-17","Statement":{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/${aws:username}"}}`, true, []check{
			{Request{User: "a", Action: "s3:GetObject", Resource: obj("a")}, NoMatch},
			{Request{User: "a", Action: "s3:GetObject", Resource: obj("${aws:username}")}, Allow},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.policy), "doc")
			if err != nil {
				t.Fatal(err)
			}
			if p.IsPublic() != tc.public {
				t.Errorf("IsPublic = %v", p.IsPublic())
			}
			for i, c := range tc.checks {
				if got := p.Evaluate(&c.req, false); got != c.want {
					t.Errorf("check %d (%+v): %v, want %v", i, c.req, got, c.want)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	stmt := func(s string) string { return `{"Version":"2012-10-17","Statement":[` + s + `]}` }
	for _, tc := range []struct {
		name, doc string
		notImpl   bool
		msg       string
	}{
		{"not JSON", `{"Version":`, false, "invalid Json"},
		{"unknown field", `{"Version":"2012-10-17","Statements":[]}`, false, "invalid Json"},
		{"no statement", `{"Version":"2012-10-17","Statement":[]}`, false, "Statement"},
		{"bad version", `{"Version":"2020-01-01","Statement":[]}`, false, "version"},
		{"bad effect", stmt(`{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*"}`), false, "effect"},
		{"no principal", stmt(`{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*"}`), false, "Principal"},
		{"NotPrincipal", stmt(`{"Effect":"Deny","NotPrincipal":{"AWS":"arn:aws:iam::1:user/a"},"Action":"s3:*","Resource":"arn:aws:s3:::doc/*"}`), true, "NotPrincipal"},
		{"service principal", stmt(`{"Effect":"Allow","Principal":{"Service":"logging.s3.amazonaws.com"},"Action":"s3:PutObject","Resource":"arn:aws:s3:::doc/*"}`), true, "Service"},
		{"another bucket", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}`), false, "resource"},
		{"not s3", stmt(`{"Effect":"Allow","Principal":"*","Action":"ec2:RunInstances","Resource":"arn:aws:s3:::doc/*"}`), false, "action"},
		{"both actions", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","NotAction":"s3:PutObject","Resource":"arn:aws:s3:::doc/*"}`), false, "Action"},
		{"bad operator", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"StringSorta":{"s3:prefix":"a"}}}`), false, "Condition"},
		{"set operator", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"ForAnyValue:StringEquals":{"s3:prefix":"a"}}}`), true, "ForAnyValue"},
		{"bad address", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*","Condition":{"IpAddress":{"aws:SourceIp":"300.1.1.1"}}}`), false, "300.1.1.1"},
		{"too large", `{"Version":"2012-10-17","Id":"` + strings.Repeat("x", MaxPolicySize) + `"}`, false, "smaller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "doc")
			var pe *Error
			if !errors.As(err, &pe) || pe.NotImplemented != tc.notImpl || !strings.Contains(pe.Msg, tc.msg) {
				t.Fatalf("Parse: %v (want a %s error, not implemented %v)", err, tc.msg, tc.notImpl)
			}
		})
	}
}

func TestWildMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"a*", "abc", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*b*", "abc", true}, {"*.jpg", "x/y.jpg", true}, {"*.jpg", "x/y.jpeg", false},
		{"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYbZ", false}, {"\x00*", "*", true}, {"\x00*", "x", false},
	} {
		if got := wildMatch(tc.pattern, tc.s, false); got != tc.want {
			t.Errorf("wildMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/*"}]}`))
	f.Add([]byte(`{"Version":"2012-10-17","Statement":{"Effect":"Deny","Principal":{"AWS":["arn:aws:iam::1:user/a"]},"NotAction":"s3:*","Resource":"arn:aws:s3:::doc","Condition":{"IpAddressIfExists":{"aws:SourceIp":["10.0.0.0/8"]},"Null":{"s3:prefix":true}}}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := Parse(doc, "doc")
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("an error that is not a policy error: %v", err)
			}
			return
		}
		// A parsed policy evaluates without panicking, whatever the request.
		for _, r := range []Request{
			{Action: "s3:GetObject", Resource: "arn:aws:s3:::doc/k"},
			{User: "a", Action: "s3:ListBucket", Resource: "arn:aws:s3:::doc", Context: ctx("aws:sourceip", "10.1.1.1", "s3:prefix", "x")},
		} {
			p.Evaluate(&r, false)
			p.Evaluate(&r, true)
		}
		p.IsPublic()
	})
}

// BenchmarkEvaluate10 evaluates a request against ten statements, the tenth the one that
// allows it (every statement is looked at).
func BenchmarkEvaluate10(b *testing.B) {
	var st []string
	for i := 0; i < 9; i++ {
		st = append(st, `{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/u`+string(rune('0'+i))+`"},"Action":["s3:GetObject","s3:PutObject"],"Resource":"arn:aws:s3:::doc/team/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/16"}}}`)
	}
	st = append(st, `{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:user/alice"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::doc/home/${aws:username}/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}`)
	p, err := Parse([]byte(`{"Version":"2012-10-17","Statement":[`+strings.Join(st, ",")+`]}`), "doc")
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{User: "alice", Action: "s3:GetObject", Resource: "arn:aws:s3:::doc/home/alice/photo.jpg", Context: ctx("aws:securetransport", "false", "aws:sourceip", "127.0.0.1")}
	b.ReportAllocs()
	for b.Loop() {
		if p.Evaluate(req, false) != Allow {
			b.Fatal("not allowed")
		}
	}
}
