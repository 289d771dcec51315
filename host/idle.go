package host

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// IdlestCPU is the CPU of online that spent the most time idle over d
// (/proc/stat), where a measurement of what one reader adds is least
// drowned by other work; the last online CPU where /proc/stat says nothing.
func IdlestCPU(procRoot string, online []int, d time.Duration) (int, error) {
	if len(online) == 0 {
		return 0, fmt.Errorf("no online CPU")
	}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return online[len(online)-1], err
	}
	a, err := fs.Stat()
	if err != nil {
		return online[len(online)-1], err
	}
	time.Sleep(d)
	b, err := fs.Stat()
	if err != nil {
		return online[len(online)-1], err
	}
	best, most := online[len(online)-1], -1.0
	for _, c := range online {
		x, okA := a.CPU[int64(c)]
		y, okB := b.CPU[int64(c)]
		if !okA || !okB {
			continue
		}
		if idle := y.Idle - x.Idle; idle > most {
			best, most = c, idle
		}
	}
	return best, nil
}
