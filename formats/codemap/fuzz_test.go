package codemap

import (
	"bytes"
	"os"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/addrmap"
)

// elfBytes is a file a process maps, as the fuzzer makes it.
type elfBytes struct{ *bytes.Reader }

func (elfBytes) Close() error { return nil }

// FuzzBinary: whatever a sampled process maps (an ELF file's headers,
// section table, symbol and line tables, as bytes of its choosing), its
// code and symbols are read without a panic, what the map keeps stays
// within its budget, and all of it returns to the budget once the
// process is gone.
func FuzzBinary(f *testing.F) {
	// tiny.elf: gcc -O1 -g -nostdlib -static of a loop calling a function
	// (symbols, DWARF lines).
	for _, name := range []string{"testdata/tiny.elf"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b, uint32(0x1000))
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"), uint32(0))
	const budget = 1 << 20
	f.Fuzz(func(t *testing.T, file []byte, ipOff uint32) {
		const pid, start = 7, 0x400000
		maps := addrmap.New()
		maps.Set(pid, []addrmap.Mapping{{Start: start, End: start + 1<<24, PgOff: 0, Name: "/usr/bin/fuzzed"}})
		m := New(maps, func(uint32, string) (File, string, error) {
			return elfBytes{bytes.NewReader(file)}, "fuzzed", nil
		}, nil)
		m.SetBudget(budget)
		ip := uint64(start) + uint64(ipOff)%(1<<24)
		if _, code, _ := m.Text(pid, ip, nil); len(code) > 64<<10 {
			t.Fatalf("%d bytes of code for one instruction", len(code))
		}
		m.Symbolize(pid, ip)
		if m.Bytes() > budget {
			t.Fatalf("%d bytes kept, budget %d", m.Bytes(), budget)
		}
		m.Forget(pid)
		maps.Forget(pid)
		m.CloseIdle()
		if m.Bytes() != 0 {
			t.Fatalf("%d bytes still kept once the process is gone", m.Bytes())
		}
	})
}
