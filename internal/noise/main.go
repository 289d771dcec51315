// Command noise loads a machine the way the project's shared machines are
// loaded while tests run: processes spinning, faulting fresh pages,
// switching between cgroups, and a CPU going offline and back. It does not
// take the tests' machine lock (testenv.LockMachine): the neighbours it
// stands for do not either. scripts/noisy runs a command under it.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	// A child re-executed with a role does that and nothing else.
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case "spin":
			for {
			}
		case "faults":
			faults()
		case "pingpong":
			pingpong()
		}
	}
	var (
		spin    = flag.Int("spin", 2, "processes spinning in user mode")
		fault   = flag.Int("faults", 1, "processes faulting 64 MiB of fresh pages over and over")
		pairs   = flag.Int("cgroup-pairs", 1, "pairs of processes in two cgroups waking each other through a pipe (a cgroup switch each way)")
		hotplug = flag.Duration("hotplug", 0, "take the last online CPU offline for a second every this long (0: never)")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	self, err := os.Executable()
	if err != nil {
		log.Error("noise", "err", err)
		os.Exit(1)
	}
	var kids []*exec.Cmd
	start := func(role string, in io.Reader, out io.Writer, cgroup string) error {
		cmd := exec.Command(self, role)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if cgroup != "" {
			f, err := os.Open(cgroup)
			if err != nil {
				return err
			}
			defer f.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", role, err)
		}
		kids = append(kids, cmd)
		return nil
	}
	var cgroups []string
	defer func() {
		for _, k := range kids {
			k.Process.Kill()
			k.Wait()
		}
		for _, d := range cgroups {
			os.Remove(d)
		}
	}()
	fail := func(err error) {
		log.Error("noise", "err", err)
		os.Exit(1)
	}
	for range *spin {
		if err := start("spin", nil, nil, ""); err != nil {
			fail(err)
		}
	}
	for range *fault {
		if err := start("faults", nil, nil, ""); err != nil {
			fail(err)
		}
	}
	if *pairs > 0 {
		mnt := cgroup2Mount()
		if mnt == "" {
			fail(fmt.Errorf("no cgroup v2 hierarchy mounted for -cgroup-pairs"))
		}
		for i := range *pairs {
			var ends [2]string
			for j := range ends {
				ends[j] = filepath.Join(mnt, fmt.Sprintf("pmu_exporter_noise_%d_%d_%d", os.Getpid(), i, j))
				if err := os.Mkdir(ends[j], 0o755); err != nil {
					fail(err)
				}
				cgroups = append(cgroups, ends[j])
			}
			// a reads what b writes and the other way round.
			ar, bw, err := os.Pipe()
			if err != nil {
				fail(err)
			}
			br, aw, err := os.Pipe()
			if err != nil {
				fail(err)
			}
			if _, err := aw.Write([]byte{1}); err != nil { // the first ball
				fail(err)
			}
			if err := start("pingpong", ar, aw, ends[0]); err != nil {
				fail(err)
			}
			if err := start("pingpong", br, bw, ends[1]); err != nil {
				fail(err)
			}
			for _, f := range []*os.File{ar, aw, br, bw} {
				f.Close()
			}
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	log.Info("noise", "spinning", *spin, "faulting", *fault, "cgroup_pairs", *pairs, "hotplug", *hotplug)
	if *hotplug <= 0 {
		<-stop
		return
	}
	tick := time.NewTicker(*hotplug)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if err := offlineForASecond(); err != nil {
				log.Warn("hotplug", "err", err)
			}
		}
	}
}

// faults maps 64 MiB, writes a byte to each page and unmaps it, forever:
// a page fault per page, each on a fresh page.
func faults() {
	const size = 64 << 20
	page := os.Getpagesize()
	for {
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			os.Exit(1)
		}
		for i := 0; i < size; i += page {
			mem[i] = 1
		}
		unix.Munmap(mem)
	}
}

// pingpong passes a byte from stdin to stdout, forever: each pass wakes the
// other end of the pair, in the other cgroup.
func pingpong() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			os.Exit(0)
		}
		if _, err := os.Stdout.Write(b[:]); err != nil {
			os.Exit(0)
		}
	}
}

// offlineForASecond takes the last online CPU offline for a second.
func offlineForASecond() error {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return err
	}
	// "0-1" or "0,2-3": the last number is the last CPU.
	s := strings.TrimSpace(string(b))
	last := s[strings.LastIndexAny(s, ",-")+1:]
	if _, err := strconv.Atoi(last); err != nil || last == "0" {
		return fmt.Errorf("no CPU to take offline in %q", s)
	}
	ctl := "/sys/devices/system/cpu/cpu" + last + "/online"
	if err := os.WriteFile(ctl, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("offline CPU %s: %w", last, err)
	}
	time.Sleep(time.Second)
	if err := os.WriteFile(ctl, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("online CPU %s: %w", last, err)
	}
	return nil
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(post); ok && len(f) > 0 && f[0] == "cgroup2" {
			if p := strings.Fields(pre); len(p) > 4 {
				return p[4]
			}
		}
	}
	return ""
}
