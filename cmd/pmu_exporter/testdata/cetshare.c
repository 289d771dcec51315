// cetshare: the False-Sharing benchmark with f = 1 in C, for tests of code
// built as Ubuntu and Fedora build theirs (-fcf-protection: every function
// starts with endbr64). Two threads atomically add, each to its own 8-byte
// slot of one cache line, for the seconds given; it prints its pid and the
// line's address as one JSON line before they start.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static _Alignas(64) volatile long slots[8];
static volatile int stop;

__attribute__((noinline)) static void *work(void *arg) {
	volatile long *slot = arg;
	while (!stop)
		for (int i = 0; i < 1024; i++)
			__atomic_add_fetch(slot, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 2;
	printf("{\"pid\":%d,\"line\":%lu}\n", (int)getpid(), (unsigned long)slots);
	fflush(stdout);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, work, (void *)&slots[i]);
	struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&d, NULL);
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}
