package memlock

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLookupPasswdHostile: whatever the image's passwd holds, a lookup
// allocates nothing beyond its answer, and a home the runtime's API cannot
// carry is reported, not returned.
func TestLookupPasswdHostile(t *testing.T) {
	colons := bytes.Repeat([]byte(":"), PasswdMaxBytes)
	bad := bytes.Repeat([]byte("::\n"), PasswdMaxBytes/3)
	fields := []byte(strings.Repeat("a:x:1000:1000:"+strings.Repeat("g,", 1000)+":/home/a:/bin/sh\n", 100))
	for name, text := range map[string][]byte{"a 1 MiB line of colons": colons, "lines without a uid": bad, "long entries": fields} {
		if allocs := testing.AllocsPerRun(3, func() { LookupPasswd(text, 4242) }); allocs > 0 {
			t.Errorf("%s: %.0f allocations per lookup; want none", name, allocs)
		}
	}
	for _, tc := range []struct {
		name, text string
		want       Passwd
	}{
		{"exactly six fields", "a:x:1000:1000::/home/a\n", Passwd{Status: PasswdFound, Home: "/home/a"}},
		{"uid over 32 bits", "a:x:4294968296:1000::/home/a\n", Passwd{Status: PasswdNoEntry}},
		{"uid with a sign", "a:x:+1000:1000::/home/a\n", Passwd{Status: PasswdNoEntry}},
		{"uid with leading zeros", "a:x:000000000001000:1000::/home/a\n", Passwd{Status: PasswdFound, Home: "/home/a"}},
		{"five fields", "a:x:1000:1000:/home/a\n", Passwd{Status: PasswdNoEntry}},
		{"no newline at the end", "a:x:1000:1000::/home/a:/bin/sh", Passwd{Status: PasswdFound, Home: "/home/a"}},
		{"home not UTF-8", "a:x:1000:1000::/home/\xff\xfe:/bin/sh\n", Passwd{Why: `the home of uid 1000 in it, "/home/\xff\xfe", is not valid UTF-8, which the runtime's API cannot carry`}},
		{"a later valid entry does not replace the first", "a:x:1000:1000::/\xff:/bin/sh\nb:x:1000:1000::/home/b:/bin/sh\n", Passwd{Why: `the home of uid 1000 in it, "/\xff", is not valid UTF-8, which the runtime's API cannot carry`}},
	} {
		if d := cmp.Diff(tc.want, LookupPasswd([]byte(tc.text), 1000)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}
