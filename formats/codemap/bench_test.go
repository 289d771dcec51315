package codemap

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pmu-exporter/pmu_exporter/formats/memop"
)

// BenchmarkResolveCold is the address sampler's cold path: the first
// sample at each IP reads its function's code from the file and decodes
// it. One op resolves every instruction boundary of five library
// functions of this binary once, through a fresh resolver.
func BenchmarkResolveCold(b *testing.B) {
	m, pid := selfCodeMap(b)
	self, err := os.Open("/proc/self/mem")
	if err != nil {
		b.Fatal(err)
	}
	defer self.Close()
	var ips []uint64
	for _, fn := range []any{fmt.Sprintf, strings.Index, sort.Strings, strconv.ParseFloat, strings.Fields} {
		entry := uint64(reflect.ValueOf(fn).Pointer())
		end := entry
		for f := runtime.FuncForPC(uintptr(end)); f != nil && f.Entry() == uintptr(entry); f = runtime.FuncForPC(uintptr(end)) {
			end++
		}
		code := make([]byte, end-entry)
		if _, err := self.ReadAt(code, int64(entry)); err != nil {
			b.Fatal(err)
		}
		for pos := 0; pos < len(code); {
			o := memop.DecodeAMD64(code[pos:])
			if o.Len == 0 {
				break
			}
			ips = append(ips, entry+uint64(pos))
			pos += int(o.Len)
		}
	}
	var regs memop.Regs
	b.ResetTimer()
	for range b.N {
		r, _ := memop.NewResolver(m, "amd64")
		for _, ip := range ips {
			r.Resolve(pid, ip, &regs)
		}
	}
	b.ReportMetric(float64(len(ips)), "ips/op")
}
