package contract

import (
	"fmt"
	"strconv"
	"strings"
)

// Mode names, as written in AnnotationMode. ipoib combines with either RDMA
// mode ("rdma-shared,ipoib"); none stands alone.
const (
	ModeShared    = "rdma-shared"
	ModeExclusive = "rdma-exclusive"
	ModeIPoIB     = "ipoib"
	ModeNone      = "none"
)

// ModeNames are the names a mode value combines, in the order messages
// list them.
func ModeNames() []string { return []string{ModeShared, ModeExclusive, ModeIPoIB, ModeNone} }

// AcceptedModes lists every accepted mode value for an error message: each
// name alone, then ipoib with each RDMA mode, then none.
const AcceptedModes = ModeShared + ", " + ModeExclusive + ", " + ModeIPoIB + ", " +
	ModeShared + "," + ModeIPoIB + ", " + ModeExclusive + "," + ModeIPoIB + ", " + ModeNone

// Mode is a parsed mode value. The zero Mode is none.
type Mode struct {
	Shared, Exclusive, IPoIB bool
}

// RDMA reports whether the mode hands the pod RDMA devices.
func (m Mode) RDMA() bool { return m.Shared || m.Exclusive }

// String is the canonical spelling: the RDMA mode first, then ipoib, comma
// separated; none for the zero Mode. There are five, so it is safe as a
// metric label.
func (m Mode) String() string {
	switch {
	case m.Shared && m.IPoIB:
		return ModeShared + "," + ModeIPoIB
	case m.Exclusive && m.IPoIB:
		return ModeExclusive + "," + ModeIPoIB
	case m.Shared:
		return ModeShared
	case m.Exclusive:
		return ModeExclusive
	case m.IPoIB:
		return ModeIPoIB
	}
	return ModeNone
}

// ModeError says why a mode value was refused. Exactly one of Unknown (a
// part that names no mode) and Conflict (why the parts cannot combine) is
// set.
type ModeError struct {
	Unknown  string
	Conflict string
}

func (e *ModeError) Error() string {
	if e.Conflict != "" {
		return e.Conflict + "; accepted: " + AcceptedModes
	}
	return "unknown mode " + strconv.Quote(e.Unknown) + "; accepted: " + AcceptedModes
}

// ParseMode reads a mode value: comma-separated mode names, spaces around
// them ignored. The error is a *ModeError.
func ParseMode(v string) (Mode, error) {
	var m Mode
	none := false
	for part := range strings.SplitSeq(v, ",") {
		switch p := strings.TrimSpace(part); p {
		case ModeShared:
			m.Shared = true
		case ModeExclusive:
			m.Exclusive = true
		case ModeIPoIB:
			m.IPoIB = true
		case ModeNone:
			none = true
		default:
			return Mode{}, &ModeError{Unknown: p}
		}
	}
	switch {
	case m.Shared && m.Exclusive:
		return Mode{}, &ModeError{Conflict: fmt.Sprintf("%s and %s exclude each other", ModeShared, ModeExclusive)}
	case none && m != (Mode{}):
		return Mode{}, &ModeError{Conflict: fmt.Sprintf("%s cannot be combined", ModeNone)}
	}
	return m, nil
}
