// SPDX-License-Identifier: MIT
/*
 * cudaloop: the cost of tokenscope's CUDA probes per GPU step, isolated for benchmarks.
 *
 * Loads the CUDA runtime (no GPU needed: every call fails, but each function is entered, so
 * the probes fire), prints "ready PID", waits for a line on stdin (the benchmark attaches a
 * tracer meanwhile), then issues STEPS prefill-shaped steps (LAUNCHES cudaLaunchKernel calls,
 * then cudaStreamSynchronize) and STEPS decode-shaped steps (cudaGraphLaunch, a device-to-host
 * cudaMemcpyAsync, cudaStreamSynchronize), and prints its own CPU time and the wall time per
 * step of each kind.
 * It exits after a second line (or EOF).
 *
 * Built with -DCUDALOOP_STATIC and linked with libcudart_static.a, it calls the runtime linked
 * into its own executable instead (the tracer must then find the runtime in the executable).
 *
 * usage: cudaloop [--cudart PATH] [-n STEPS] [--launches N] [--gap-ms MS] [--late]
 *
 * --gap-ms MS sleeps MS milliseconds after each step (steps spread over time, as a server's
 * are; the per-step figures then include the sleeps). --late loads the runtime only after the
 * first line, and goes into its steps at once: an engine that maps CUDA after the tracer
 * attached, whose first step follows its dlopen by microseconds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* dim3 goes by value, as in cuda_runtime_api.h: a 12-byte struct takes two registers each. */
typedef struct {
	unsigned int x, y, z;
} dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*graph_fn)(void *, void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int, void *);
typedef int (*sync_fn)(void *);

#ifdef CUDALOOP_STATIC
extern int cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
extern int cudaGraphLaunch(void *, void *);
extern int cudaMemcpyAsync(void *, const void *, size_t, int, void *);
extern int cudaStreamSynchronize(void *);
#endif

static double wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void gap(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	if (ms > 0)
		nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
	const char *path = "/usr/local/cuda/lib64/libcudart.so.13";
	long steps = 2000, launches = 40, gap_ms = 0;
	int late = 0;
	char line[16], buf[8];
	const dim3 one = { 1, 1, 1 };
	launch_fn launch;
	graph_fn graph;
	memcpy_fn cpy;
	sync_fn sync;
	double c0, c1, c2, w0, w1, w2;
	void *h;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--cudart") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--launches") && i + 1 < argc)
			launches = atol(argv[++i]);
		else if (!strcmp(argv[i], "--gap-ms") && i + 1 < argc)
			gap_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--late"))
			late = 1;
		else {
			fprintf(stderr, "usage: cudaloop [--cudart PATH] [-n STEPS] [--launches N] "
					"[--gap-ms MS] [--late]\n");
			return 2;
		}
	}
	if (late) {
		printf("ready %d\n", getpid());
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
#ifdef CUDALOOP_STATIC
	(void)path;
	(void)h;
	launch = cudaLaunchKernel;
	graph = cudaGraphLaunch;
	cpy = cudaMemcpyAsync;
	sync = cudaStreamSynchronize;
#else
	h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "cudaloop: %s\n", dlerror());
		return 1;
	}
	launch = (launch_fn)dlsym(h, "cudaLaunchKernel");
	graph = (graph_fn)dlsym(h, "cudaGraphLaunch");
	cpy = (memcpy_fn)dlsym(h, "cudaMemcpyAsync");
	sync = (sync_fn)dlsym(h, "cudaStreamSynchronize");
#endif
	if (!launch || !graph || !cpy || !sync) {
		fprintf(stderr, "cudaloop: %s lacks the runtime functions\n", path);
		return 1;
	}
	/* CUDA initialises on a program's first call (and loads an injection library then):
	 * before the tracer attaches, as in a server that is already up. */
	sync(NULL);
	if (!late) {
		printf("ready %d\n", getpid());
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	c0 = cpu_now();
	w0 = wall_now();
	for (long s = 0; s < steps; s++) {
		for (long i = 0; i < launches; i++)
			launch(NULL, one, one, NULL, 0, NULL);
		sync(NULL);
		gap(gap_ms);
	}
	c1 = cpu_now();
	w1 = wall_now();
	for (long s = 0; s < steps; s++) {
		graph(NULL, NULL);
		cpy(buf, buf, 4, 2, NULL);
		sync(NULL);
		gap(gap_ms);
	}
	c2 = cpu_now();
	w2 = wall_now();
	printf("steps=%ld launches=%ld prefill_us_per_step=%.2f decode_us_per_step=%.2f "
	       "prefill_wall_us_per_step=%.2f decode_wall_us_per_step=%.2f\n",
	       steps, launches, (c1 - c0) * 1e6 / steps, (c2 - c1) * 1e6 / steps,
	       (w1 - w0) * 1e6 / steps, (w2 - w1) * 1e6 / steps);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
