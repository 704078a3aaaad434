// SPDX-License-Identifier: MIT
/*
 * sysloop: what a process nobody traces pays per syscall while tokenscope runs, for benchmarks.
 *
 * tokenscope's syscall programs hang on the raw sys_enter and sys_exit tracepoints, which every
 * syscall of every process on the machine passes through: a process it does not trace pays the
 * tracepoints and the programs' first test on each of its syscalls. This loop makes N syscalls of
 * one kind and prints its own CPU and wall time per syscall; the benchmark runs it with no
 * tracer loaded and with tokenscope tracing another process, and the difference is that cost,
 * with kernel.bpf_stats off (its clock reads are not part of it).
 *
 *   getppid  a syscall the programs do not follow (they stop at the syscall number)
 *   socket   a one-byte write and read on a local stream socket pair: syscalls the programs
 *            follow up to the test of the traced-process map
 *
 * usage: sysloop [-n COUNT] [getppid | socket]
 * prints: kind=K calls=N cpu_ns_per_call=X wall_ns_per_call=Y
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = 1000000;
	const char *kind = "getppid";
	int sv[2];
	char b = 'x';

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = atol(argv[++i]);
		else if (!strcmp(argv[i], "getppid") || !strcmp(argv[i], "socket"))
			kind = argv[i];
		else {
			fprintf(stderr, "usage: sysloop [-n COUNT] [getppid | socket]\n");
			return 2;
		}
	}
	if (n <= 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		perror("sysloop");
		return 1;
	}
	bool sock = !strcmp(kind, "socket");
	double w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);

	for (long i = 0; i < n; i++) {
		if (!sock) {
			syscall(SYS_getppid);
		} else if (write(sv[0], &b, 1) != 1 || read(sv[1], &b, 1) != 1) {
			perror("sysloop: socket");
			return 1;
		}
	}
	double calls = sock ? 2.0 * n : n;
	double cpu = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0, wall = now_ns(CLOCK_MONOTONIC) - w0;

	printf("kind=%s calls=%.0f cpu_ns_per_call=%.1f wall_ns_per_call=%.1f\n", kind, calls,
	       cpu / calls, wall / calls);
	return 0;
}
