package lifecycle

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func doc(rules ...string) string {
	return "<LifecycleConfiguration>" + strings.Join(rules, "") + "</LifecycleConfiguration>"
}

// parseTests are the table of Parse, and the fuzzer's seeds. code "" means accepted.
var parseTests = []struct {
	name, doc, code string
}{
	{"days", doc(`<Rule><ID>a</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>`), ""},
	{"date", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Date>2027-01-01T00:00:00Z</Date></Expiration></Rule>`), ""},
	{"legacy prefix", doc(`<Rule><Prefix>x</Prefix><Status>Disabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), ""},
	{"and", doc(`<Rule><Filter><And><Prefix>p</Prefix><Tag><Key>k</Key><Value>v</Value></Tag><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></And></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), ""},
	{"noncurrent", doc(`<Rule><Filter></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays><NewerNoncurrentVersions>3</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`), ""},
	{"noncurrent with tag", doc(`<Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays></NoncurrentVersionExpiration></Rule>`), ""},
	{"marker", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`), ""},
	{"abort", doc(`<Rule><Filter><Prefix>u/</Prefix></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>7</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`), ""},
	{"overlapping prefixes", doc(`<Rule><ID>a</ID><Filter><Prefix>a</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`,
		`<Rule><ID>b</ID><Filter><Prefix>ab</Prefix></Filter><Status>Enabled</Status><Expiration><Days>2</Days></Expiration></Rule>`), ""},

	{"not xml", "<LifecycleConfiguration><Rule>", "MalformedXML"},
	{"no rule", doc(), "MalformedXML"},
	{"days zero", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>0</Days></Expiration></Rule>`), "InvalidArgument"},
	{"days negative", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>-1</Days></Expiration></Rule>`), "InvalidArgument"},
	{"days not a number", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>x</Days></Expiration></Rule>`), "MalformedXML"},
	{"date not midnight", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Date>2027-01-01T10:00:00Z</Date></Expiration></Rule>`), "InvalidArgument"},
	{"date garbage", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Date>tomorrow</Date></Expiration></Rule>`), "InvalidArgument"},
	{"days and date", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>1</Days><Date>2027-01-01T00:00:00Z</Date></Expiration></Rule>`), "MalformedXML"},
	{"marker and days", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`), "MalformedXML"},
	{"empty expiration", doc(`<Rule><Filter/><Status>Enabled</Status><Expiration></Expiration></Rule>`), "MalformedXML"},
	{"duplicate ids", doc(`<Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`,
		`<Rule><ID>a</ID><Filter/><Status>Enabled</Status><Expiration><Days>2</Days></Expiration></Rule>`), "InvalidArgument"},
	{"long id", doc(`<Rule><ID>` + strings.Repeat("i", 256) + `</ID><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "InvalidArgument"},
	{"bad status", doc(`<Rule><Filter/><Status>On</Status><Expiration><Days>1</Days></Expiration></Rule>`), "MalformedXML"},
	{"no filter", doc(`<Rule><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "MalformedXML"},
	{"filter and prefix", doc(`<Rule><Prefix>a</Prefix><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "MalformedXML"},
	{"two filter elements", doc(`<Rule><Filter><Prefix>a</Prefix><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "MalformedXML"},
	{"and of one", doc(`<Rule><Filter><And><Prefix>a</Prefix></And></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "MalformedXML"},
	{"duplicate tag keys", doc(`<Rule><Filter><And><Tag><Key>k</Key><Value>1</Value></Tag><Tag><Key>k</Key><Value>2</Value></Tag></And></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "InvalidRequest"},
	{"sizes crossed", doc(`<Rule><Filter><And><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan><ObjectSizeLessThan>5</ObjectSizeLessThan></And></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`), "InvalidArgument"},
	{"no action", doc(`<Rule><Filter/><Status>Enabled</Status></Rule>`), "InvalidRequest"},
	{"marker with tag", doc(`<Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`), "InvalidRequest"},
	{"abort with tag", doc(`<Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`), "InvalidRequest"},
	{"abort with size", doc(`<Rule><Filter><ObjectSizeGreaterThan>1048576</ObjectSizeGreaterThan></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`), "InvalidRequest"},
	{"abort with size in and", doc(`<Rule><Filter><And><Prefix>u/</Prefix><ObjectSizeLessThan>10</ObjectSizeLessThan></And></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`), "InvalidRequest"},
	{"abort zero", doc(`<Rule><Filter/><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`), "InvalidArgument"},
	{"noncurrent zero", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays></NoncurrentVersionExpiration></Rule>`), "InvalidArgument"},
	{"newer too many", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`), "InvalidArgument"},
	{"transition", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition></Rule>`), ""},
	{"transition days 0", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>0</Days><StorageClass>cold</StorageClass></Transition></Rule>`), ""},
	{"transition date", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Date>2027-01-01T00:00:00Z</Date><StorageClass>cold</StorageClass></Transition><Expiration><Date>2027-02-01T00:00:00Z</Date></Expiration></Rule>`), ""},
	{"transition then expiration", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>cold</StorageClass></Transition><Expiration><Days>31</Days></Expiration></Rule>`), ""},
	{"transition and marker cleanup", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>cold</StorageClass></Transition><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`), ""},
	{"transition negative", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>-1</Days><StorageClass>cold</StorageClass></Transition></Rule>`), "InvalidArgument"},
	{"transition days and date", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>1</Days><Date>2027-01-01T00:00:00Z</Date><StorageClass>cold</StorageClass></Transition></Rule>`), "MalformedXML"},
	{"transition neither", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><StorageClass>cold</StorageClass></Transition></Rule>`), "MalformedXML"},
	{"transition no class", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>1</Days></Transition></Rule>`), "MalformedXML"},
	{"transition date not midnight", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Date>2027-01-01T05:00:00Z</Date><StorageClass>cold</StorageClass></Transition></Rule>`), "InvalidArgument"},
	{"expiration before transition", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>cold</StorageClass></Transition><Expiration><Days>30</Days></Expiration></Rule>`), "InvalidArgument"},
	{"expiration date before transition", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Date>2027-02-01T00:00:00Z</Date><StorageClass>cold</StorageClass></Transition><Expiration><Date>2027-01-01T00:00:00Z</Date></Expiration></Rule>`), "InvalidArgument"},
	{"transition days, expiration date", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>3</Days><StorageClass>cold</StorageClass></Transition><Expiration><Date>2027-01-01T00:00:00Z</Date></Expiration></Rule>`), "InvalidRequest"},
	{"two transitions", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>3</Days><StorageClass>cold</StorageClass></Transition><Transition><Days>30</Days><StorageClass>remote</StorageClass></Transition></Rule>`), "NotImplemented"},
	{"noncurrent transition", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition></Rule>`), ""},
	{"noncurrent transition newer", doc(`<Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>0</NoncurrentDays><StorageClass>cold</StorageClass><NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionTransition><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>`), ""},
	{"noncurrent transition alone in a rule with transition", doc(`<Rule><Filter/><Status>Enabled</Status><Transition><Days>10</Days><StorageClass>cold</StorageClass></Transition><NoncurrentVersionTransition><NoncurrentDays>5</NoncurrentDays><StorageClass>cold</StorageClass></NoncurrentVersionTransition></Rule>`), ""},
	{"noncurrent transition negative", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>-1</NoncurrentDays><StorageClass>cold</StorageClass></NoncurrentVersionTransition></Rule>`), "InvalidArgument"},
	{"noncurrent transition no days", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><StorageClass>cold</StorageClass></NoncurrentVersionTransition></Rule>`), "MalformedXML"},
	{"noncurrent transition no class", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays></NoncurrentVersionTransition></Rule>`), "MalformedXML"},
	{"noncurrent transition newer zero", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays><StorageClass>cold</StorageClass><NewerNoncurrentVersions>0</NewerNoncurrentVersions></NoncurrentVersionTransition></Rule>`), "InvalidArgument"},
	{"noncurrent transition newer too many", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays><StorageClass>cold</StorageClass><NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionTransition></Rule>`), "InvalidArgument"},
	{"noncurrent expiration before transition", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>cold</StorageClass></NoncurrentVersionTransition><NoncurrentVersionExpiration><NoncurrentDays>30</NoncurrentDays></NoncurrentVersionExpiration></Rule>`), "InvalidArgument"},
	{"two noncurrent transitions", doc(`<Rule><Filter/><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays><StorageClass>cold</StorageClass></NoncurrentVersionTransition><NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>remote</StorageClass></NoncurrentVersionTransition></Rule>`), "NotImplemented"},
	{"too many rules", doc(strings.Repeat(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`, MaxRules+1)), "MalformedXML"},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc))
			var e *Error
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.code != "" && !errors.As(err, &e):
				t.Fatalf("accepted or not an *Error: %v", err)
			case tt.code != "" && e.Code != tt.code:
				t.Fatalf("got %s (%s), want %s", e.Code, e.Message, tt.code)
			case tt.code != "":
				return
			}
			for _, rl := range c.Rules {
				if rl.ID == "" || len(rl.ID) > MaxID {
					t.Errorf("rule ID %q", rl.ID)
				}
			}
			// The stored form parses to the same configuration (IDs kept).
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			c2, err := Parse(out)
			if err != nil {
				t.Fatalf("stored form refused: %v\n%s", err, out)
			}
			if out2, _ := c2.Marshal(); string(out2) != string(out) {
				t.Fatalf("stored form changed:\n%s\n%s", out, out2)
			}
		})
	}
}

func TestParseGeneratedIDsUnique(t *testing.T) {
	c, err := Parse([]byte(doc(strings.Repeat(`<Rule><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`, 50))))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rl := range c.Rules {
		if seen[rl.ID] || len(rl.ID) != 48 {
			t.Fatalf("ID %q repeated or not 48 characters", rl.ID)
		}
		seen[rl.ID] = true
	}
}

func mustParse(t testing.TB, rules ...string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc(rules...)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var day0 = time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)

func TestDueRounding(t *testing.T) {
	// S3's example: created 1/15 10:30 UTC, 3 days: expires 1/19 00:00 UTC.
	if got, want := dueAfter(day0, 3), time.Date(2026, 1, 19, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("due %v, want %v", got, want)
	}
	mid := time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC)
	if got := dueAfter(mid, 1); !got.Equal(mid.Add(24 * time.Hour)) {
		t.Fatalf("midnight + 1 day: %v", got)
	}
}

// TestEvaluateHugeDays: a valid rule of more days than a time.Duration holds (106752
// days: 2^63 ns is 106751.99 days) expires nothing now. Days*24h wrapped to the past and
// every object of the bucket was due at once.
func TestEvaluateHugeDays(t *testing.T) {
	for _, days := range []string{"106752", "200000", "9223372036854775807"} {
		c := mustParse(t,
			`<Rule><ID>r</ID><Filter/><Status>Enabled</Status><Expiration><Days>`+days+`</Days></Expiration>`+
				`<NoncurrentVersionExpiration><NoncurrentDays>`+days+`</NoncurrentDays></NoncurrentVersionExpiration>`+
				`<AbortIncompleteMultipartUpload><DaysAfterInitiation>`+days+`</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`)
		vs := []Version{{HLC: 2, ModTime: day0, Size: 1}, {HLC: 1, ModTime: day0.Add(-time.Hour), Size: 1}}
		if got := c.Evaluate("k", vs, day0.Add(48*time.Hour)); len(got) != 0 {
			t.Errorf("days %s: due at once: %+v", days, got)
		}
		if id := c.AbortDue("k", day0, day0.Add(48*time.Hour)); id != "" {
			t.Errorf("days %s: upload abort due at once", days)
		}
		if at, _, ok := c.Expiry("k", vs[0]); !ok || at.Before(day0) {
			t.Errorf("days %s: x-amz-expiration %v (%v)", days, at, ok)
		}
	}
}

func TestEvaluate(t *testing.T) {
	c := mustParse(t,
		`<Rule><ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>`,
		`<Rule><ID>big</ID><Filter><ObjectSizeGreaterThan>100</ObjectSizeGreaterThan></Filter><Status>Enabled</Status><Expiration><Days>10</Days></Expiration></Rule>`,
		`<Rule><ID>tmp</ID><Filter><Tag><Key>tmp</Key><Value>yes</Value></Tag></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`,
		`<Rule><ID>off</ID><Filter/><Status>Disabled</Status><Expiration><Days>1</Days></Expiration></Rule>`,
		`<Rule><ID>nc</ID><Filter/><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>`,
		`<Rule><ID>dm</ID><Filter/><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>`,
	)
	at := func(days int) time.Time { return day0.Add(time.Duration(days) * 24 * time.Hour) }
	obj := func(hlc uint64, mod time.Time, size int64, tags ...[2]string) Version {
		return Version{HLC: hlc, ModTime: mod, Size: size, Tags: tags}
	}
	tests := []struct {
		name string
		key  string
		vs   []Version
		now  time.Time
		want string
	}{
		{"logs not yet", "logs/a", []Version{obj(1, day0, 1)}, at(3), ""},
		{"logs due", "logs/a", []Version{obj(1, day0, 1)}, at(4), "expire_current:1:logs"},
		{"other prefix", "data/a", []Version{obj(1, day0, 1)}, at(9), ""},
		{"big", "data/a", []Version{obj(1, day0, 101)}, at(11), "expire_current:1:big"},
		{"size is strict", "data/a", []Version{obj(1, day0, 100)}, at(11), ""},
		{"tag", "data/a", []Version{obj(1, day0, 1, [2]string{"tmp", "yes"})}, at(2), "expire_current:1:tmp"},
		{"tag other value", "data/a", []Version{obj(1, day0, 1, [2]string{"tmp", "no"})}, at(2), ""},
		{"marker alone", "data/a", []Version{{HLC: 5, ModTime: day0, DeleteMarker: true}}, at(0), "remove_marker:5:dm"},
		{"marker with history", "data/a", []Version{{HLC: 5, ModTime: at(1), DeleteMarker: true}, obj(1, day0, 1)}, at(2), ""},
		{"noncurrent kept by newer", "data/a", []Version{obj(3, at(5), 1), obj(2, at(1), 1), obj(1, day0, 1)}, at(30),
			"expire_noncurrent:1:nc"},
		{"noncurrent not yet", "data/a", []Version{obj(3, at(5), 1), obj(2, at(4), 1), obj(1, day0, 1)}, at(5), ""},
		{"noncurrent marker", "logs/a", []Version{obj(3, at(20), 1), {HLC: 2, ModTime: at(10), DeleteMarker: true}, obj(1, day0, 1)}, at(22),
			"expire_noncurrent:1:nc"},
		{"current and noncurrent", "logs/a", []Version{obj(3, at(20), 1), obj(2, at(10), 1), obj(1, day0, 1)}, at(24),
			"expire_current:3:logs expire_noncurrent:1:nc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range c.Evaluate(tt.key, tt.vs, tt.now) {
				got = append(got, fmt.Sprintf("%s:%d:%s", a.Kind, a.HLC, a.Rule))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Fatalf("got %q, want %q", g, tt.want)
			}
		})
	}
}

// TestEvaluateTransition: a Transition is due Days after the write (S3's rounding) or from
// its Date, on current versions only, never on an archived one or one due to expire.
func TestEvaluateTransition(t *testing.T) {
	c := mustParse(t,
		`<Rule><ID>old</ID><Filter><Prefix>old/</Prefix></Filter><Status>Enabled</Status><Transition><Days>30</Days><StorageClass>COLD</StorageClass></Transition><Expiration><Days>60</Days></Expiration></Rule>`,
		`<Rule><ID>on</ID><Filter><Prefix>d/</Prefix></Filter><Status>Enabled</Status><Transition><Date>2026-03-01T00:00:00Z</Date><StorageClass>remote</StorageClass></Transition></Rule>`,
	)
	at := func(days int) time.Time { return day0.Add(time.Duration(days) * 24 * time.Hour) }
	v := func(hlc uint64, mod time.Time) Version { return Version{HLC: hlc, ModTime: mod, Size: 1} }
	archived := v(1, day0)
	archived.Archived = true
	tests := []struct {
		name string
		key  string
		vs   []Version
		now  time.Time
		want string
	}{
		{"not yet", "old/a", []Version{v(1, day0)}, at(30), ""},
		{"due", "old/a", []Version{v(1, day0)}, at(31), "transition:1:old:cold"},
		{"archived", "old/a", []Version{archived}, at(31), ""},
		{"expires instead", "old/a", []Version{v(1, day0)}, at(61), "expire_current:1:old:"},
		{"noncurrent stays", "old/a", []Version{v(2, at(40)), v(1, day0)}, at(41), ""},
		{"marker", "old/a", []Version{{HLC: 2, ModTime: day0, DeleteMarker: true}, v(1, day0)}, at(41), ""},
		{"before the date", "d/a", []Version{v(1, day0)}, time.Date(2026, 2, 28, 23, 0, 0, 0, time.UTC), ""},
		{"from the date", "d/a", []Version{v(1, day0)}, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), "transition:1:on:remote"},
		{"other prefix", "x/a", []Version{v(1, day0)}, at(1000), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range c.Evaluate(tt.key, tt.vs, tt.now) {
				got = append(got, fmt.Sprintf("%s:%d:%s:%s", a.Kind, a.HLC, a.Rule, a.Tier))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Fatalf("got %q, want %q", g, tt.want)
			}
		})
	}
	if err := c.CheckTiers(func(tier string) bool { return tier == "cold" }); err == nil || !strings.Contains(err.Error(), "InvalidStorageClass") || !strings.Contains(err.Error(), "remote") {
		t.Fatalf("CheckTiers with remote missing: %v", err)
	}
	if err := c.CheckTiers(func(string) bool { return true }); err != nil {
		t.Fatalf("CheckTiers: %v", err)
	}
}

// TestEvaluateNoncurrentTransition: a NoncurrentVersionTransition is due NoncurrentDays
// after the version became noncurrent (its successor's creation, S3's rounding), on
// noncurrent versions only, beyond the NewerNoncurrentVersions newest, never on a delete
// marker, an archived version or one due to expire (deletion first).
func TestEvaluateNoncurrentTransition(t *testing.T) {
	c := mustParse(t,
		`<Rule><ID>nt</ID><Filter><Prefix>v/</Prefix></Filter><Status>Enabled</Status>`+
			`<NoncurrentVersionTransition><NoncurrentDays>10</NoncurrentDays><StorageClass>COLD</StorageClass><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionTransition>`+
			`<NoncurrentVersionExpiration><NoncurrentDays>100</NoncurrentDays></NoncurrentVersionExpiration></Rule>`,
		`<Rule><ID>all</ID><Filter><Prefix>a/</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionTransition><NoncurrentDays>0</NoncurrentDays><StorageClass>remote</StorageClass></NoncurrentVersionTransition></Rule>`,
	)
	at := func(days int) time.Time { return day0.Add(time.Duration(days) * 24 * time.Hour) }
	v := func(hlc uint64, mod time.Time) Version { return Version{HLC: hlc, ModTime: mod, Size: 1} }
	archived := v(1, day0)
	archived.Archived = true
	tests := []struct {
		name string
		key  string
		vs   []Version
		now  time.Time
		want string
	}{
		{"current only", "a/k", []Version{v(1, day0)}, at(100), ""},
		{"same day", "a/k", []Version{v(2, at(1)), v(1, day0)}, at(1), ""},
		{"next midnight", "a/k", []Version{v(2, at(1)), v(1, day0)}, at(2), "transition_noncurrent:1:all:remote"},
		// Counted from the successor's creation (day 5), not the version's own (day 0).
		{"not yet", "v/k", []Version{v(3, at(20)), v(2, at(5)), v(1, day0)}, at(15), ""},
		{"due", "v/k", []Version{v(3, at(20)), v(2, at(5)), v(1, day0)}, at(16), "transition_noncurrent:1:nt:cold"},
		{"newest noncurrent kept", "v/k", []Version{v(3, at(20)), v(2, at(5)), v(1, day0)}, at(60), "transition_noncurrent:1:nt:cold"},
		{"archived", "v/k", []Version{v(3, at(20)), v(2, at(5)), archived}, at(60), ""},
		{"marker", "v/k", []Version{v(3, at(20)), {HLC: 2, ModTime: at(5), DeleteMarker: true}, v(1, day0)}, at(60), "transition_noncurrent:1:nt:cold"},
		{"expires instead", "v/k", []Version{v(3, at(200)), v(2, at(5)), v(1, day0)}, at(106), "expire_noncurrent:1:nt:"},
		{"archived expires", "v/k", []Version{v(3, at(200)), v(2, at(5)), archived}, at(106), "expire_noncurrent:1:nt:"},
		{"other prefix", "x/k", []Version{v(2, at(1)), v(1, day0)}, at(1000), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range c.Evaluate(tt.key, tt.vs, tt.now) {
				got = append(got, fmt.Sprintf("%s:%d:%s:%s", a.Kind, a.HLC, a.Rule, a.Tier))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Fatalf("got %q, want %q", g, tt.want)
			}
		})
	}
	if err := c.CheckTiers(func(tier string) bool { return tier == "cold" }); err == nil || !strings.Contains(err.Error(), "remote") {
		t.Fatalf("CheckTiers with remote missing: %v", err)
	}
	if !c.Transitions() {
		t.Fatal("Transitions false for noncurrent transitions")
	}
}

// TestEvaluateMarkerByDays: a rule with Days removes a delete marker that is its key's
// only version once the marker is that old, as S3 does; not one with history.
func TestEvaluateMarkerByDays(t *testing.T) {
	c := mustParse(t, `<Rule><ID>d</ID><Filter/><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>`)
	lone := []Version{{HLC: 5, ModTime: day0, DeleteMarker: true}}
	if a := c.Evaluate("k", lone, day0.Add(3*24*time.Hour)); len(a) != 0 {
		t.Fatalf("due before its days: %v", a)
	}
	if a := c.Evaluate("k", lone, day0.Add(4*24*time.Hour)); len(a) != 1 || a[0].Kind != RemoveMarker || a[0].HLC != 5 {
		t.Fatalf("not removed after its days: %v", a)
	}
	history := append(lone, Version{HLC: 1, ModTime: day0.Add(-time.Hour), Size: 1})
	if a := c.Evaluate("k", history, day0.Add(40*24*time.Hour)); len(a) != 0 {
		t.Fatalf("a marker with a version behind it: %v", a)
	}
}

func TestEvaluateDate(t *testing.T) {
	c := mustParse(t, `<Rule><ID>d</ID><Filter/><Status>Enabled</Status><Expiration><Date>2026-02-01T00:00:00Z</Date></Expiration></Rule>`)
	v := []Version{{HLC: 1, ModTime: day0, Size: 1}}
	if a := c.Evaluate("k", v, time.Date(2026, 1, 31, 23, 59, 0, 0, time.UTC)); len(a) != 0 {
		t.Fatalf("due before the date: %v", a)
	}
	if a := c.Evaluate("k", v, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)); len(a) != 1 || a[0].Kind != ExpireCurrent {
		t.Fatalf("not due on the date: %v", a)
	}
	exp, id, ok := c.Expiry("k", v[0])
	if !ok || id != "d" || !exp.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Expiry %v %q %v", exp, id, ok)
	}
}

func TestAbortDue(t *testing.T) {
	c := mustParse(t, `<Rule><ID>u</ID><Filter><Prefix>up/</Prefix></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>`)
	if !c.Uploads() {
		t.Fatal("Uploads false")
	}
	if id := c.AbortDue("up/x", day0, day0.Add(48*time.Hour)); id != "" {
		t.Fatalf("due before midnight: %q", id)
	}
	if id := c.AbortDue("up/x", day0, day0.Add(62*time.Hour)); id != "u" {
		t.Fatalf("not due: %q", id)
	}
	if id := c.AbortDue("other", day0, day0.Add(1000*time.Hour)); id != "" {
		t.Fatalf("other prefix due: %q", id)
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		if len(tt.doc) < 4096 {
			f.Add([]byte(tt.doc))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error not an *Error: %v", err)
			}
			return
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("stored form of an accepted document refused: %v\n%s", err, out)
		}
		c.Evaluate("key", []Version{{HLC: 2, ModTime: day0, Size: 5}, {HLC: 1, ModTime: day0}}, day0.Add(1000*24*time.Hour))
	})
}

// BenchmarkEvaluate is the cost of evaluating one object's versions against a
// configuration of 10 rules (prefixes, a tag and a size filter), the per-object cost of
// the runner.
func BenchmarkEvaluate(b *testing.B) {
	var rules []string
	for i := range 8 {
		rules = append(rules, fmt.Sprintf(`<Rule><ID>p%d</ID><Filter><Prefix>logs%d/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>30</Days></Expiration></Rule>`, i, i))
	}
	rules = append(rules,
		`<Rule><ID>t</ID><Filter><And><Prefix>data/</Prefix><Tag><Key>class</Key><Value>tmp</Value></Tag></And></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>`,
		`<Rule><ID>nc</ID><Filter><ObjectSizeGreaterThan>1024</ObjectSizeGreaterThan></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays></NoncurrentVersionExpiration></Rule>`)
	c := mustParse(b, rules...)
	vs := []Version{{HLC: 2, ModTime: day0, Size: 4096, Tags: [][2]string{{"class", "keep"}}}, {HLC: 1, ModTime: day0.Add(-time.Hour), Size: 4096}}
	now := day0.Add(2 * time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if a := c.Evaluate("data/2026/01/15/object-000123.bin", vs, now); len(a) != 0 {
			b.Fatal(a)
		}
	}
}

// A parsed configuration is shared by concurrent requests: evaluating a Date rule whose
// date parses to the zero time writes nothing into it (run under -race).
func TestExpiryConcurrentZeroDate(t *testing.T) {
	c, err := Parse([]byte(doc(`<Rule><ID>z</ID><Filter/><Status>Enabled</Status><Expiration><Date>0001-01-01T00:00:00Z</Date></Expiration></Rule>`)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan time.Time)
	for range 4 {
		go func() {
			due, _, _ := c.Expiry("k", Version{ModTime: time.Now()})
			done <- due
		}()
	}
	for range 4 {
		if due := <-done; !due.IsZero() {
			t.Fatalf("due %v, want the zero date", due)
		}
	}
}
