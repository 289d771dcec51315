package cpuhotplug

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pmu-exporter/pmu_exporter/internal/testenv"
)

// Uevents as this project's VM's kernel (6.18) sent them for a CPU
// toggled through sysfs, the modalias shortened, and others it sends.
var uevents = []struct {
	msg  string
	want Event
	ok   bool
}{
	{"offline@/devices/system/cpu/cpu1\x00ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00MODALIAS=cpu:type:x86,ven0002fam0019mod0001:feature:,0000,0001\n\x00SEQNUM=45756\x00", Event{CPU: 1}, true},
	{"online@/devices/system/cpu/cpu1\x00ACTION=online\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00MODALIAS=cpu:type:x86,ven0002fam0019mod0001:feature:,0000,0001\n\x00SEQNUM=45758\x00", Event{CPU: 1, Online: true}, true},
	{"online@/devices/system/cpu/cpu127\x00ACTION=online\x00SUBSYSTEM=cpu\x00", Event{CPU: 127, Online: true}, true},
	// The cpuid device of the same CPU, added and removed beside it.
	{"add@/devices/virtual/cpuid/cpu1\x00ACTION=add\x00DEVPATH=/devices/virtual/cpuid/cpu1\x00SUBSYSTEM=cpuid\x00MAJOR=203\x00MINOR=1\x00DEVNAME=cpu/1/cpuid\x00SEQNUM=45757\x00", Event{}, false},
	{"remove@/devices/virtual/cpuid/cpu1\x00ACTION=remove\x00SUBSYSTEM=cpuid\x00", Event{}, false},
	// A memory block going online: another subsystem.
	{"online@/devices/system/memory/memory32\x00ACTION=online\x00SUBSYSTEM=memory\x00", Event{}, false},
	{"change@/devices/system/cpu/cpu3\x00ACTION=change\x00SUBSYSTEM=cpu\x00", Event{}, false},
	{"online@/devices/system/cpu/cpu3\x00SUBSYSTEM=node\x00", Event{}, false},
	{"online@/devices/system/cpu/cpufreq\x00SUBSYSTEM=cpu\x00", Event{}, false},
	{"online@/devices/system/cpu/cpu-1\x00", Event{}, false},
	{"online /devices/system/cpu/cpu1", Event{}, false},
	{"", Event{}, false},
	// libudev's own messages (group 2) begin with its magic.
	{"libudev\x00\xfe\xed\xca\xfe", Event{}, false},
}

func TestParse(t *testing.T) {
	for _, u := range uevents {
		got, ok := Parse([]byte(u.msg))
		if got != u.want || ok != u.ok {
			t.Errorf("%q: %+v %v, want %+v %v", strings.SplitN(u.msg, "\x00", 2)[0], got, ok, u.want, u.ok)
		}
	}
}

// FuzzParse: no message makes Parse panic, and what it accepts names a
// CPU's online or offline event in the message's own header.
func FuzzParse(f *testing.F) {
	for _, u := range uevents {
		f.Add([]byte(u.msg))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		e, ok := Parse(msg)
		if !ok {
			return
		}
		action := "offline@"
		if e.Online {
			action = "online@"
		}
		if e.CPU < 0 || !strings.HasPrefix(string(msg), action+"/devices/system/cpu/cpu") {
			t.Errorf("%q parsed as %+v", msg, e)
		}
	})
}

// A CPU toggled through sysfs is heard going offline and coming back, in
// that order, by every subscriber. Another process holding the CPU
// offline meanwhile (a write of what it already is sends no uevent) makes
// the round fail; one round of five must pass.
func TestListenHearsHotplug(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	l, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	a, _ := l.Subscribe()
	b, _ := l.Subscribe()
	_, gone := l.Subscribe()
	gone() // an ended subscription is not woken: Run would block on it
	subs := []<-chan Event{a, b}
	go func() { done <- l.Run(ctx) }()
	// hears waits for sub to hear want, passing over other CPUs' events.
	hears := func(sub <-chan Event, want Event) bool {
		deadline := time.After(2 * time.Second)
		for {
			select {
			case e := <-sub:
				if e == want {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	heard := false
	for round := 0; round < 5 && !heard; round++ {
		testenv.AwaitPresentOnline(t, 5*time.Second)
		heard = true
		for _, v := range []string{"0", "1"} {
			if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
			for i, sub := range subs {
				if !hears(sub, Event{CPU: cpu, Online: v == "1"}) {
					t.Logf("round %d: subscriber %d did not hear CPU %d go %s", round, i, cpu, map[string]string{"0": "offline", "1": "online"}[v])
					heard = false
				}
			}
		}
	}
	if !heard {
		t.Errorf("in five rounds, no toggle of CPU %d was heard whole", cpu)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v", err)
	}
}
