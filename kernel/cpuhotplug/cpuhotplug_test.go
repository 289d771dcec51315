package cpuhotplug

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// The kernel sends CPU uevents to a network namespace of the initial user
// namespace (a pod's without hostNetwork), and none to one that a user
// namespace of its own owns (a rootless container's), where Listen says
// so rather than listen to silence. A child of this test in each kind of
// namespace listens, whatever Listen would say, while the test toggles a
// CPU.
func TestListenInNamespaces(t *testing.T) {
	cpu, ctl := testenv.HotplugCPU(t)
	for _, c := range []struct {
		name  string
		flags uintptr
		heard bool
	}{
		{"network namespace", unix.CLONE_NEWNET, true},
		{"user and network namespaces", unix.CLONE_NEWUSER | unix.CLONE_NEWNET, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for round := 0; ; round++ {
				if round == 5 {
					t.Fatalf("in five rounds the child never heard CPU %d go offline and come back", cpu)
				}
				testenv.AwaitPresentOnline(t, 5*time.Second)
				verdict, events := listenInChild(t, c.flags, func() {
					for _, v := range []string{"0", "1"} {
						if err := os.WriteFile(ctl, []byte(v), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					time.Sleep(200 * time.Millisecond) // the online uevent comes after the write returns
				})
				if !c.heard {
					if !strings.Contains(verdict, ErrUserNamespace.Error()) {
						t.Errorf("Listen in the child: %q, want ErrUserNamespace", verdict)
					}
					if len(events) > 0 {
						t.Errorf("the kernel sent the child %v: ErrUserNamespace is wrong", events)
					}
					return
				}
				if verdict != "ok" {
					t.Fatalf("Listen in the child: %s", verdict)
				}
				want := []string{fmt.Sprintf("%d offline", cpu), fmt.Sprintf("%d online", cpu)}
				if slices.Equal(slices.DeleteFunc(events, func(e string) bool { return !slices.Contains(want, e) }), want) {
					return
				}
				t.Logf("round %d: the child heard %v, want %v (another process's hotplug?): again", round, events, want)
			}
		})
	}
}

// listenInChild runs this test binary as listenChild in new namespaces
// (flags; a new user namespace maps root to root) and toggle while it
// listens; it returns what Listen said there and the CPU events the
// child's socket received, as "CPU online|offline".
func listenInChild(t *testing.T, flags uintptr, toggle func()) (verdict string, events []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CPUHOTPLUG_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	if flags&unix.CLONE_NEWUSER != 0 {
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("child in namespaces %#x: %v", flags, err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		cmd.Wait()
		t.Fatal("the child said nothing")
	}
	verdict = lines.Text() // it listens from here on
	toggle()
	stdin.Close()
	for lines.Scan() {
		events = append(events, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	return verdict, events
}

// TestMain runs listenChild where listenInChild started this binary.
func TestMain(m *testing.M) {
	if os.Getenv("CPUHOTPLUG_CHILD") == "1" {
		if err := listenChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// listenChild is listenInChild's child: it prints what Listen says, then,
// on a socket of its own whatever Listen said, each CPU event until its
// standard input closes.
func listenChild() error {
	verdict := "ok"
	if l, err := Listen(); err != nil {
		verdict = err.Error()
	} else {
		l.Close()
	}
	l, err := listen()
	if err != nil {
		return err
	}
	sub, _ := l.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	fmt.Println(verdict)
	closed := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(closed) }()
	for {
		select {
		case e := <-sub:
			fmt.Printf("%d %s\n", e.CPU, map[bool]string{true: "online", false: "offline"}[e.Online])
		case <-closed:
			cancel()
			return <-done
		}
	}
}
