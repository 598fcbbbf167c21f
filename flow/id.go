package flow

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// crockford is the ULID alphabet: ids sort as strings in creation order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// TaskIDLen is the length of a task id.
const TaskIDLen = 26

// NewTaskIDs makes n task ids: 48 bits of milliseconds then 80 random bits,
// in Crockford base32 (the ULID layout). They are unique without a counter
// shared between servers, and sort by creation time, which cursor
// pagination relies on.
func NewTaskIDs(now time.Time, n int) []string {
	ids := make([]string, n)
	b := stamped(uint64(now.UnixMilli()))
	rand.Read(b[6:]) // never fails (crypto/rand panics on a broken source)
	b[6] &^= 0x80    // room to count up without overflow
	for i := range ids {
		ids[i] = encode128(b)
		// The next id of the batch is this one plus one, so a batch's ids
		// sort in request order (ULID's monotonic rule).
		for k := 15; k >= 6; k-- {
			b[k]++
			if b[k] != 0 {
				break
			}
		}
	}
	return ids
}

// TaskIDFloor is the least id NewTaskIDs can make at t or later: every id
// made before t's millisecond sorts below it.
func TaskIDFloor(t time.Time) string { return encode128(stamped(uint64(max(t.UnixMilli(), 0)))) }

// stamped is an id's 128 bits with the 48 of milliseconds set, the rest zero.
func stamped(ms uint64) (b [16]byte) {
	for k := 0; k < 6; k++ {
		b[k] = byte(ms >> (40 - 8*k))
	}
	return b
}

func encode128(b [16]byte) string {
	// 128 bits as 26 base32 digits, most significant first (the first digit
	// holds the top 3 bits).
	var out [TaskIDLen]byte
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := TaskIDLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// ValidateTaskID checks the shape of a task id (or a list cursor).
func ValidateTaskID(field, id string) error {
	if id == "" {
		return fieldErr(field, "required")
	}
	if len(id) != TaskIDLen {
		return fieldErr(field, "%q is not a task id (%d characters of 0-9A-Z)", clip(id), TaskIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return fieldErr(field, "%q is not a task id (%d characters of 0-9A-Z)", clip(id), TaskIDLen)
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return truncUTF8(s, 40) + "…"
	}
	return s
}

// NewLease makes a lease token: 128 random bits in hex. One token fences a
// task for one hold; the next hold of the task gets a new one.
func NewLease() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
