// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/clock.h"
#include "loader/proc.h"
#include "loader/release.h"

/* The directory entries read at a time. */
#define RELEASE_DENTS_BYTES 4096

struct linux_dirent64 {
	unsigned long long d_ino;
	long long d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* A descriptor the kernel is slow to release: a BPF object or a perf event (a probe's). */
static bool slow_fd(int fd)
{
	char path[40], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n <= 0)
		return false;
	target[n] = 0;
	return !strncmp(target, "anon_inode:bpf", 14) ||
	       !strncmp(target, "anon_inode:[perf_event]", 23);
}

/* Closes this process's descriptors of the slow kinds, or of the others but keep. System calls
 * alone (run in the child of a process with threads). */
static void close_kind(bool slow, int keep)
{
	char buf[RELEASE_DENTS_BYTES];
	int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long n;

	if (dir < 0)
		return;
	/* Closing while reading the directory: read it again from the start until a pass
	 * closes nothing. */
	for (bool again = true; again;) {
		again = false;
		lseek(dir, 0, SEEK_SET);
		while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
			for (long at = 0; at < n;) {
				struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + at);
				int fd = 0;
				const char *p = d->d_name;

				at += d->d_reclen;
				if (*p < '0' || *p > '9')
					continue;
				for (; *p >= '0' && *p <= '9'; p++)
					fd = fd * 10 + (*p - '0');
				if (fd == dir || fd == keep || slow_fd(fd) != slow)
					continue;
				close(fd);
				again = true;
			}
		}
	}
	close(dir);
}

int release_background(void (*after)(void))
{
	static const int ignored[] = {
		SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE
	};
	int go[2];
	pid_t pid;
	char c;

	if (pipe2(go, O_CLOEXEC))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(go[0]);
		close(go[1]);
		return err;
	}
	if (pid > 0) {
		/* Its references first (the child still holds each: no wait), then the child may
		 * close its own, the last ones. */
		close(go[0]);
		close_kind(true, -1);
		close(go[1]);
		return pid;
	}
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		signal(ignored[i], SIG_IGN);
	prctl(PR_SET_NAME, "tokenscope-exit");
	/* The plain descriptors at once: outputs, sockets, the other pipes' ends. */
	close(go[1]);
	close_kind(false, go[0]);
	while (read(go[0], &c, 1) < 0 && errno == EINTR)
		;
	close(go[0]);
	close_kind(true, -1);
	if (after)
		after();
	_exit(0);
}

int release_wait_earlier(const char *proc_root, double max_s, double say_s, FILE *err)
{
	double start = mono_s();
	bool said = false;
	pid_t pid;

	while ((pid = (pid_t)proc_find_live(proc_root, "tokenscope-exit"))) {
		double waited = mono_s() - start;

		if (waited >= max_s) {
			fprintf(err,
				"tokenscope: tokenscope-exit (PID %d) still removes an earlier run's "
				"probes after %.0f s: starting anyway (calls into the same functions "
				"may be missed until it is done)\n",
				(int)pid, max_s);
			return -ETIMEDOUT;
		}
		if (!said && waited >= say_s) {
			fprintf(err,
				"tokenscope: waiting for tokenscope-exit (PID %d) to remove an earlier "
				"run's probes first\n",
				(int)pid);
			said = true;
		}
		usleep(20000);
	}
	return 0;
}
