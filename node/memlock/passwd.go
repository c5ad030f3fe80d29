package memlock

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// PasswdMaxBytes bounds how much of an image's /etc/passwd is read: a real
// one is a few kilobytes, and the agent reads it inside the runtime's call.
const PasswdMaxBytes = 1 << 20

// LookupPasswd finds uid in passwd file text as glibc's files backend does
// for getpwuid: lines "name:password:uid:gid:gecos:dir:shell", blank lines
// and lines starting with '#' skipped, the first entry with the uid wins.
// text holding no entry for uid gives PasswdNoEntry. Only the first six
// fields of a line are cut out, in place, so any text costs one pass and no
// allocation (a line of a million colons included). A home that is not
// valid UTF-8 cannot reach the runtime (its API's strings are UTF-8): the
// entry is then reported unread, with why.
func LookupPasswd(text []byte, uid uint32) Passwd {
	for len(text) > 0 {
		var line []byte
		line, text, _ = bytes.Cut(text, []byte("\n"))
		line = bytes.TrimLeft(line, " \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		f, ok := passwdFields(line)
		if !ok {
			continue
		}
		if u, ok := parseUID(f[2]); !ok || u != uid {
			continue
		}
		if !utf8.Valid(f[5]) {
			home := f[5][:min(len(f[5]), 64)]
			return Passwd{Why: fmt.Sprintf("the home of uid %d in it, %s, is not valid UTF-8, which the runtime's API cannot carry", uid, strconv.QuoteToASCII(string(home)))}
		}
		return Passwd{Status: PasswdFound, Home: string(f[5])}
	}
	return Passwd{Status: PasswdNoEntry}
}

// passwdFields cuts the first six ':'-separated fields of line; ok is
// false when it has fewer.
func passwdFields(line []byte) (f [6][]byte, ok bool) {
	for i := range f {
		var found bool
		f[i], line, found = bytes.Cut(line, []byte(":"))
		if !found && i < len(f)-1 {
			return f, false
		}
	}
	return f, true
}

// parseUID reads a uid field as strconv.ParseUint(s, 10, 32) would,
// without the error value it allocates for every line that is not one.
func parseUID(b []byte) (uint32, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u = u*10 + uint64(c-'0'); u > 1<<32-1 {
			return 0, false
		}
	}
	return uint32(u), true
}
