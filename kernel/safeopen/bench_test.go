package safeopen

import (
	"io"
	"os"
	"reflect"
	"testing"
	"time"
)

// What the decoder's bound costs a read of a process's code: its readMem
// opens /proc/PID/mem, reads a function's bytes and closes it, directly
// before the bound and through a Deadline (a goroutine and a buffer of
// its own each read) after it.
func BenchmarkMemRead(b *testing.B) {
	addr := int64(reflect.ValueOf(BenchmarkMemRead).Pointer())
	open := func() (io.ReaderAt, io.Closer, error) {
		f, err := os.Open("/proc/self/mem")
		return f, f, err
	}
	buf := make([]byte, 4096)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			r, c, err := open()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := r.ReadAt(buf, addr); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("deadline", func(b *testing.B) {
		d := &Deadline{Budget: time.Second, MaxAbandoned: 16}
		for b.Loop() {
			if _, err := d.ReadAt(open, buf, addr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
