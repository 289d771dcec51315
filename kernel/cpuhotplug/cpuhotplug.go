// Package cpuhotplug tells when CPUs go online or offline, as the kernel
// announces it to udev: a kobject uevent ("online@/devices/system/cpu/cpu1")
// on a NETLINK_KOBJECT_UEVENT socket. Per-CPU events that follow hotplug
// only at their next read count nothing on a CPU that came online until
// then (up to a counting interval); woken by the uevent, their owner
// opens them within milliseconds.
//
// The kernel sends these uevents to every network namespace owned by the
// initial user namespace (Linux 4.18+), so a pod without hostNetwork
// hears them too, unless it runs in a user namespace of its own.
package cpuhotplug

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Event is one CPU's change; Overrun events name no CPU (-1): the socket's
// buffer overflowed, so changes may have gone unheard.
type Event struct {
	CPU     int
	Online  bool
	Overrun bool
}

// Listener reads the kernel's uevents and wakes its subscribers at each
// CPU change.
type Listener struct {
	f *os.File

	mu   sync.Mutex
	subs []chan Event
}

// ErrUserNamespace says that the kernel sends this network namespace no
// uevents: it belongs to a user namespace other than the initial one.
var ErrUserNamespace = errors.New("this network namespace belongs to a user namespace other than the initial one (a user-namespaced or rootless container), and the kernel sends hardware uevents only to network namespaces of the initial user namespace")

// Listen opens the uevent socket (the kernel's multicast group 1, which
// needs no privilege to receive). Where the kernel sends this network
// namespace nothing, it fails with ErrUserNamespace rather than listen to
// silence.
func Listen() (*Listener, error) {
	if err := heard(); err != nil {
		return nil, err
	}
	return listen()
}

func listen() (*Listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uevent socket: bind to the kernel's group: %w", err)
	}
	return &Listener{f: os.NewFile(uintptr(fd), "uevent")}, nil
}

const (
	// nsGetUserns is NS_GET_USERNS, _IO(0xb7, 0x1) (Linux 4.9+): the
	// user namespace that owns a namespace, as an fd.
	nsGetUserns = 0xb701
	// initUserNSInode is PROC_USER_INIT_INO, the fixed inode number of the
	// initial user namespace (include/linux/proc_ns.h).
	initUserNSInode = 0xEFFFFFFD
)

// heard returns ErrUserNamespace where this process's network namespace is
// owned by a user namespace other than the initial one: the kernel
// broadcasts uevents without a namespace tag, a CPU's among them, only to
// network namespaces whose owner is the initial user namespace
// (uevent_net_broadcast_untagged, Linux 4.18+). Where that cannot be told
// (a kernel before 4.9, an owner outside this process's view) it returns
// nil: the listener then waits for what comes.
func heard() error {
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	owner, err := unix.IoctlRetInt(fd, nsGetUserns)
	if err != nil {
		return nil
	}
	defer unix.Close(owner)
	var st unix.Stat_t
	if err := unix.Fstat(owner, &st); err != nil {
		return nil
	}
	if st.Ino != initUserNSInode {
		return fmt.Errorf("uevent socket: %w (owner user namespace inode %d)", ErrUserNamespace, st.Ino)
	}
	return nil
}

// Subscribe returns a channel that receives the latest change whenever
// one happens (a subscriber that has not taken the previous one yet gets
// only the newer: it should read the online CPUs again either way), and
// the function that ends the subscription.
func (l *Listener) Subscribe() (<-chan Event, func()) {
	c := make(chan Event, 1)
	l.mu.Lock()
	l.subs = append(l.subs, c)
	l.mu.Unlock()
	return c, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.subs = slices.DeleteFunc(l.subs, func(s chan Event) bool { return s == c })
	}
}

func (l *Listener) notify(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.subs {
		select {
		case <-c: // replaced by the newer
		default:
		}
		c <- e
	}
}

// Run reads uevents until ctx ends or the listener is closed.
func (l *Listener) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { l.f.Close() })
	defer stop()
	rc, err := l.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("uevent socket: %w", err)
	}
	buf := make([]byte, 16<<10)
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		switch {
		case ctx.Err() != nil || errors.Is(err, os.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("uevent socket: %w", err)
		case errors.Is(rerr, unix.ENOBUFS):
			l.notify(Event{CPU: -1, Overrun: true})
			continue
		case errors.Is(rerr, syscall.EINTR):
			continue
		case rerr != nil:
			return fmt.Errorf("uevent socket: %w", rerr)
		}
		// Only the kernel (port 0) speaks for the hardware.
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue
		}
		if e, ok := Parse(buf[:n]); ok {
			l.notify(e)
		}
	}
}

// Close closes the socket (Run then returns).
func (l *Listener) Close() error { return l.f.Close() }

// Parse reads one kernel uevent: "ACTION@DEVPATH" and NUL-separated
// KEY=VALUE fields. It reports a CPU's online or offline event
// (SUBSYSTEM=cpu, DEVPATH /devices/system/cpu/cpuN); ok is false for any
// other uevent and for malformed ones.
func Parse(msg []byte) (e Event, ok bool) {
	header, rest, _ := bytes.Cut(msg, []byte{0})
	action, devpath, found := bytes.Cut(header, []byte("@"))
	if !found {
		return Event{}, false
	}
	switch string(action) {
	case "online":
		e.Online = true
	case "offline":
	default:
		return Event{}, false
	}
	name, found := bytes.CutPrefix(devpath, []byte("/devices/system/cpu/cpu"))
	if !found {
		return Event{}, false
	}
	cpu, err := strconv.Atoi(string(name))
	if err != nil || cpu < 0 {
		return Event{}, false
	}
	for f := range bytes.SplitSeq(rest, []byte{0}) {
		if v, isSub := bytes.CutPrefix(f, []byte("SUBSYSTEM=")); isSub && string(v) != "cpu" {
			return Event{}, false
		}
	}
	e.CPU = cpu
	return e, true
}
