package schedbpf

// The program is compiled with Debian's clang (the version .ci/run installs)
// and the objects are committed; CI regenerates them and fails on a diff.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -target bpfel -go-package schedbpf wait bpf/sched_wait.bpf.c
