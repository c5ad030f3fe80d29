package memlock

import (
	"bytes"
	"strconv"
)

// PasswdMaxBytes bounds how much of an image's /etc/passwd is read: a real
// one is a few kilobytes, and the agent reads it inside the runtime's call.
const PasswdMaxBytes = 1 << 20

// LookupPasswd finds uid in passwd file text as glibc's files backend does
// for getpwuid: lines "name:password:uid:gid:gecos:dir:shell", blank lines
// and lines starting with '#' skipped, the first entry with the uid wins.
// text holding no entry for uid gives PasswdNoEntry.
func LookupPasswd(text []byte, uid uint32) Passwd {
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		line = bytes.TrimLeft(line, " \t")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		f := bytes.Split(line, []byte(":"))
		if len(f) < 6 {
			continue
		}
		u, err := strconv.ParseUint(string(f[2]), 10, 32)
		if err != nil || uint32(u) != uid {
			continue
		}
		return Passwd{Status: PasswdFound, Home: string(f[5])}
	}
	return Passwd{Status: PasswdNoEntry}
}
