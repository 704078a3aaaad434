// SPDX-License-Identifier: MIT
/*
 * peekcost: what passive discovery (--all) costs the writes of a process nobody traces, for
 * benchmarks. It loads tokenscope's BPF programs with discovery on, then off, tracing nothing
 * and attaching nothing (so no other process on the machine becomes traced and changes the
 * figures), runs writeloop untraced in each, and reads the sys_enter program's run time from
 * kernel.bpf_stats (which must be enabled). Every process on the machine runs the program, so
 * each run is followed by as long a run without writeloop, and its time taken off: what other
 * processes write (frames too, on a shared machine) then cancels out. The difference per write
 * is what looking at each write adds; with frames (--sse) it is the cost of a matching write
 * until user space would have attached the process.
 *
 * usage: peekcost [-n FRAMES] [-r ROUNDS] [--sse | --writev] [--writeloop PATH]
 * Prints a line per round, then
 *   added_ns_per_write=N on_ns_per_run=N off_ns_per_run=N   (medians)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "tokenscope.skel.h"

#define MAX_ROUNDS 64

struct run_cost {
	double ns_per_write; /* sys_enter time over the writes, minus as long without writeloop */
	double ns_per_run;   /* sys_enter time per run of it, every process */
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int prog_stats(int fd, __u64 *run_ns, __u64 *runs)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	int err = bpf_obj_get_info_by_fd(fd, &info, &len);

	*run_ns = info.run_time_ns;
	*runs = info.run_cnt;
	return err;
}

/* Starts writeloop with its stdin and stdout on pipes; the pid, or -1. */
static pid_t writeloop_start(const char *path, long frames, const char *mode, int *to, FILE **from)
{
	int in[2], out[2];
	char num[32];
	pid_t child;

	if (pipe(in))
		return -1;
	if (pipe(out)) {
		close(in[0]);
		close(in[1]);
		return -1;
	}
	snprintf(num, sizeof(num), "%ld", frames);
	child = fork();
	if (child == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		if (mode)
			execl(path, "writeloop", "-n", num, mode, (char *)NULL);
		else
			execl(path, "writeloop", "-n", num, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	*to = in[1];
	*from = fdopen(out[0], "r");
	return child;
}

/* One writeloop run under the programs loaded with discovery on or off. */
static int run(bool on, const char *writeloop, long frames, const char *mode, struct run_cost *c)
{
	struct tokenscope_bpf *skel = tokenscope_bpf__open();
	__u64 t0, n0, t1, n1, t2, n2;
	double w0, wall;
	char line[256];
	FILE *from = NULL;
	int to = -1, err, fd;
	pid_t child;

	if (!skel)
		return -errno;
	skel->rodata->discover_traffic = on;
	skel->rodata->self_tgid = getpid();
	err = tokenscope_bpf__load(skel);
	if (!err)
		err = tokenscope_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "peekcost: cannot load or attach the BPF programs: %s\n",
			strerror(-err));
		tokenscope_bpf__destroy(skel);
		return err;
	}
	fd = bpf_program__fd(skel->progs.ts_sys_enter);
	err = -EIO;
	child = writeloop_start(writeloop, frames, mode, &to, &from);
	if (child < 0 || !from || !fgets(line, sizeof(line), from) || strncmp(line, "ready", 5)) {
		fprintf(stderr, "peekcost: %s did not start\n", writeloop);
	} else if ((w0 = mono_s(), prog_stats(fd, &t0, &n0)) || write(to, "go\n", 3) != 3 ||
		   !fgets(line, sizeof(line), from) || prog_stats(fd, &t1, &n1) ||
		   (wall = mono_s() - w0, usleep(wall * 1e6), prog_stats(fd, &t2, &n2))) {
		fprintf(stderr, "peekcost: the run failed\n");
	} else if (t1 == t0) {
		fprintf(stderr, "peekcost: no run time: sysctl kernel.bpf_stats_enabled=1 first\n");
	} else {
		c->ns_per_write = ((double)(t1 - t0) - (double)(t2 - t1)) / frames;
		c->ns_per_run = n1 > n0 ? (double)(t1 - t0) / (n1 - n0) : 0;
		err = 0;
	}
	if (to >= 0) {
		/* writeloop waits for a second line before it exits */
		if (write(to, "exit\n", 5) < 0)
			err = err ? err : -EIO;
		close(to);
	}
	if (from)
		fclose(from);
	if (child > 0)
		waitpid(child, NULL, 0);
	tokenscope_bpf__destroy(skel);
	return err;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), by_value);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	const char *writeloop = ".output/writeloop", *mode = "--plain";
	double added[MAX_ROUNDS], on_run[MAX_ROUNDS], off_run[MAX_ROUNDS];
	long frames = 200000;
	int rounds = 5;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			frames = atol(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--sse"))
			mode = NULL; /* writeloop's default: SSE frames, one write each */
		else if (!strcmp(argv[i], "--writev"))
			mode = "--writev";
		else if (!strcmp(argv[i], "--writeloop") && i + 1 < argc)
			writeloop = argv[++i];
		else {
			fprintf(stderr,
				"usage: peekcost [-n FRAMES] [-r ROUNDS] [--sse | --writev] "
				"[--writeloop PATH]\n");
			return 2;
		}
	}
	if (frames <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
		fprintf(stderr, "peekcost: bad -n or -r (1..%d)\n", MAX_ROUNDS);
		return 2;
	}
	libbpf_set_print(NULL);
	for (int r = 0; r < rounds; r++) {
		struct run_cost on, off;

		if (run(true, writeloop, frames, mode, &on) ||
		    run(false, writeloop, frames, mode, &off))
			return 1;
		added[r] = on.ns_per_write - off.ns_per_write;
		on_run[r] = on.ns_per_run;
		off_run[r] = off.ns_per_run;
		printf("round %d: %.1f ns per write with discovery, %.1f without: %+.1f\n", r + 1,
		       on.ns_per_write, off.ns_per_write, added[r]);
		fflush(stdout);
	}
	printf("added_ns_per_write=%.1f on_ns_per_run=%.1f off_ns_per_run=%.1f\n",
	       median(added, rounds), median(on_run, rounds), median(off_run, rounds));
	return 0;
}
