// The library a hostile process maps and then replaces by a FIFO: spin
// stores into a shared array, so that the address sampler's samples land
// here and the decoder reads this file's symbols.
#include <time.h>

volatile long cells[1024];

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void spin(double seconds) {
	double end = now() + seconds;
	for (long i = 0;; i++) {
		cells[i & 1023] += i;
		if ((i & 0xffff) == 0 && now() >= end)
			return;
	}
}
