package core

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// ID is a UUID. Event IDs are UUID version 7 by default: their first 48 bits
// are a millisecond timestamp, so new rows land at the right-hand edge of the
// primary-key index instead of scattering writes across it. Any UUID version is
// accepted when parsing, because services in other languages may insert rows
// with IDs of their own.
type ID [16]byte

// NewID returns a new UUID version 7 stamped with the current time. It panics
// only if the operating system's random source fails, as crypto/rand does.
func NewID() ID {
	return NewIDAt(time.Now())
}

// NewIDAt returns a UUID version 7 whose timestamp is t. IDs made within one
// millisecond are ordered at random: ordering guarantees come from an event's
// Sequence, never from its ID.
func NewIDAt(t time.Time) ID {
	var id ID
	if _, err := rand.Read(id[6:]); err != nil {
		panic(fmt.Sprintf("outboxkit: read random bytes: %v", err))
	}
	ms := uint64(t.UnixMilli())
	id[0] = byte(ms >> 40)
	id[1] = byte(ms >> 32)
	id[2] = byte(ms >> 24)
	id[3] = byte(ms >> 16)
	id[4] = byte(ms >> 8)
	id[5] = byte(ms)
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 9562 variant
	return id
}

// ParseID parses the canonical textual form of a UUID
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), in either case.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return id, fmt.Errorf("%w: %q is not a UUID in canonical form", ErrInvalidID, s)
	}
	hexOnly := make([]byte, 0, 32)
	hexOnly = append(hexOnly, s[0:8]...)
	hexOnly = append(hexOnly, s[9:13]...)
	hexOnly = append(hexOnly, s[14:18]...)
	hexOnly = append(hexOnly, s[19:23]...)
	hexOnly = append(hexOnly, s[24:36]...)
	if _, err := hex.Decode(id[:], hexOnly); err != nil {
		return ID{}, fmt.Errorf("%w: %q is not a UUID in canonical form", ErrInvalidID, s)
	}
	return id, nil
}

// MustParseID is like ParseID but panics on error. It is meant for constants in
// tests and examples.
func MustParseID(s string) ID {
	id, err := ParseID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// IsZero reports whether id is the nil UUID.
func (id ID) IsZero() bool { return id == ID{} }

// Time returns the timestamp embedded in a version 7 ID, or the zero time for
// other versions.
func (id ID) Time() time.Time {
	if id[6]>>4 != 7 {
		return time.Time{}
	}
	ms := int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
	return time.UnixMilli(ms)
}

// String returns the canonical lower-case textual form.
func (id ID) String() string {
	var buf [36]byte
	hex.Encode(buf[0:8], id[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], id[10:16])
	return string(buf[:])
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	parsed, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}
