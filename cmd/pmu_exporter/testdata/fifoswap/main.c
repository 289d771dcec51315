// fifoswap LIB SECONDS: what an ordinary user may do to an exporter that
// reads the code of what it samples (issue 56). It runs a second first, so
// that the sampler knows it and follows its mappings from then on by
// perf's MMAP2 records, which name a file as it was called when mapped.
// Then it maps LIB, renames it away and puts a FIFO at its path, so that
// the mapping's recorded name is a FIFO's, and runs inside LIB for
// SECONDS. Prints "swapped" once the FIFO is in place.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static volatile long cells[1024];

// spin_here stores for a second in this program's own code.
static void spin_here(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	time_t end = ts.tv_sec + 1;
	for (long i = 0;; i++) {
		cells[i & 1023] += i;
		if ((i & 0xffff) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			if (ts.tv_sec >= end)
				return;
		}
	}
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: fifoswap LIB SECONDS\n");
		return 2;
	}
	spin_here();
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void (*spin)(double) = (void (*)(double))dlsym(h, "spin");
	if (!spin) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	char moved[4096];
	snprintf(moved, sizeof moved, "%s.moved", argv[1]);
	if (rename(argv[1], moved) != 0 || mkfifo(argv[1], 0644) != 0) {
		perror("rename and mkfifo");
		return 1;
	}
	printf("swapped\n");
	fflush(stdout);
	spin(atof(argv[2]));
	return 0;
}
