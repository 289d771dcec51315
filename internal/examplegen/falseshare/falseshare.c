/* Two threads add to adjacent words of one cache line (false sharing) and,
   every eighth add, to one shared word (true sharing), for a given time. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long line[8] __attribute__((aligned(64)));
static volatile int stop;

static void *adder(void *arg) {
	long me = (long)arg;
	for (unsigned long i = 0; !stop; i++) {
		line[me] += 1;
		if ((i & 7) == 0)
			line[7] += 1;
	}
	return 0;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 1;
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], 0, adder, (void *)i);
	struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	nanosleep(&d, 0);
	stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], 0);
	return 0;
}
