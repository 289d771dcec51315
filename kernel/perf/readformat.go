package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrGroupBroken says the kernel reads a group with fewer events than were
// opened into it: it took the members off the leader, as it does to every
// group on a CPU going offline.
var ErrGroupBroken = errors.New("the kernel broke the group up (its CPU went offline)")

// DecodeGroupRead decodes what read(2) returns for
// PERF_FORMAT_GROUP|ID|TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING:
//
//	u64 nr; u64 time_enabled; u64 time_running; { u64 value; u64 id; } [nr]
//
// Values are placed by id into values, whose order is ids'; the kernel's own order
// is not trusted. A buffer that is short, names a different number of events, or
// carries an unknown id is an error, and values is then left untouched.
func DecodeGroupRead(buf []byte, ids []uint64, values []uint64) (enabled, running uint64, err error) {
	if len(values) != len(ids) {
		return 0, 0, fmt.Errorf("group read: %d value slots for %d events", len(values), len(ids))
	}
	if len(buf) < 24 {
		return 0, 0, fmt.Errorf("group read: %d bytes, shorter than the 24-byte header", len(buf))
	}
	le := binary.LittleEndian // perf records are host-endian; every supported target is little-endian
	nr := le.Uint64(buf)
	if nr < uint64(len(ids)) {
		return 0, 0, fmt.Errorf("group read: kernel reports %d events, group has %d: %w", nr, len(ids), ErrGroupBroken)
	}
	if nr != uint64(len(ids)) {
		return 0, 0, fmt.Errorf("group read: kernel reports %d events, group has %d", nr, len(ids))
	}
	if want := 24 + 16*len(ids); len(buf) < want {
		return 0, 0, fmt.Errorf("group read: %d bytes, want %d for %d events", len(buf), want, len(ids))
	}
	var filled uint64 // bitmap for up to 64 members; larger groups cannot be scheduled anyway
	if len(ids) > 64 {
		return 0, 0, fmt.Errorf("group read: %d events exceed the 64 a group may hold here", len(ids))
	}
	var tmp [64]uint64
	for i := range ids {
		v, id := le.Uint64(buf[24+16*i:]), le.Uint64(buf[32+16*i:])
		j := indexOf(ids, id)
		if j < 0 {
			return 0, 0, fmt.Errorf("group read: unknown event id %d at position %d", id, i)
		}
		if filled&(1<<j) != 0 {
			return 0, 0, fmt.Errorf("group read: event id %d appears twice", id)
		}
		filled |= 1 << j
		tmp[j] = v
	}
	copy(values, tmp[:len(ids)])
	return le.Uint64(buf[8:]), le.Uint64(buf[16:]), nil
}

func indexOf(ids []uint64, id uint64) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// EncodeGroupRead builds the buffer DecodeGroupRead reads; tests and replay use it.
func EncodeGroupRead(enabled, running uint64, ids, values []uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, 24+16*len(ids))
	le.PutUint64(b, uint64(len(ids)))
	le.PutUint64(b[8:], enabled)
	le.PutUint64(b[16:], running)
	for i := range ids {
		le.PutUint64(b[24+16*i:], values[i])
		le.PutUint64(b[32+16*i:], ids[i])
	}
	return b
}
