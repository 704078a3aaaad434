// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/clock.h"
#include "loader/hold.h"
#include "loader/kernel.h"
#include "loader/proc.h"

/* The watchdog's two descriptors, moved to these numbers before it closes every other one. */
#define WATCHDOG_PIPE_FD 3
#define WATCHDOG_MAP_FD 4
/* Where a kernel without close_range (before 5.9) stops closing descriptors one by one. */
#define WATCHDOG_CLOSE_MAX 65536
/* How often the watchdog looks for a process held too long, and how long that is: the loader
 * hooks in a few milliseconds, but it may itself be stopped (Ctrl-Z, a debugger) or blocked (a
 * terminal or pipe that does not read its output); no traced process waits longer than this
 * for it. */
#define WATCHDOG_SWEEP_MS 100
#define HOLD_MAX_NS (1000 * NS_PER_MS)

/* The watchdog's continue: every held process (ctx NULL), or those held since before *ctx. */
static void cont_old(void *ctx, uint32_t pid, uint64_t stopped_ns)
{
	const uint64_t *before = ctx;

	if (!before || stopped_ns < *before)
		kill((pid_t)pid, SIGCONT);
}

/* The watchdog's look at the map between two waits: what is held too long goes on. The entries
 * stay, for the loader to take (and to tell that it came too late). */
static void watchdog_sweep(int mapfd)
{
	uint64_t before = mono_ns() - HOLD_MAX_NS;

	kernel_held_walk_fd(mapfd, cont_old, &before);
}

/*
 * The watchdog: forked from a process that may have threads, so only system calls from here on
 * (no allocation). It keeps the map and the pipe, closes everything else (it must hold up no
 * probe, no ring buffer, no output of the loader's), ignores the signals a terminal or a
 * supervisor sends the loader's process group, and waits for the pipe to end.
 */
static void watchdog_main(int rfd, int mapfd)
{
	static const int ignored[] = {
		SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE
	};
	char c;

	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		signal(ignored[i], SIG_IGN);
	prctl(PR_SET_NAME, "tokenscope-hold");
	/* Both above the numbers they go to, so neither is overwritten by the other's dup2. */
	rfd = fcntl(rfd, F_DUPFD, 64);
	mapfd = fcntl(mapfd, F_DUPFD, 64);
	if (rfd < 0 || mapfd < 0 || dup2(rfd, WATCHDOG_PIPE_FD) < 0 ||
	    dup2(mapfd, WATCHDOG_MAP_FD) < 0)
		_exit(1);
	for (int fd = 0; fd < WATCHDOG_PIPE_FD; fd++)
		close(fd);
	if (syscall(SYS_close_range, WATCHDOG_MAP_FD + 1, ~0u, 0))
		for (int fd = WATCHDOG_MAP_FD + 1; fd < WATCHDOG_CLOSE_MAX; fd++)
			close(fd);
	for (;;) {
		struct pollfd p = { .fd = WATCHDOG_PIPE_FD, .events = POLLIN };
		int n = poll(&p, 1, WATCHDOG_SWEEP_MS);

		if (n > 0 && read(WATCHDOG_PIPE_FD, &c, 1) <= 0)
			break;
		if (n < 0 && errno != EINTR)
			break;
		watchdog_sweep(WATCHDOG_MAP_FD);
	}
	kernel_held_take_fd(WATCHDOG_MAP_FD, cont_old, NULL);
	_exit(0);
}

int hold_start(struct hold *h, struct kernel *k, bool verbose)
{
	int p[2];
	pid_t pid;

	memset(h, 0, sizeof(*h));
	h->k = k;
	h->pipe_w = -1;
	h->verbose = verbose;
	/* The write end is the loader's alone: a command it starts (run) must not keep it open. */
	if (pipe2(p, O_CLOEXEC))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(p[0]);
		close(p[1]);
		return err;
	}
	if (pid == 0)
		watchdog_main(p[0], kernel_held_fd(k));
	close(p[0]);
	h->watchdog = pid;
	h->pipe_w = p[1];
	kernel_hold_set(k, true);
	return 0;
}

struct release {
	struct hold *h;
	void (*hook)(void *ctx, uint32_t pid);
	void *ctx;
};

static void release_one(void *ctx, uint32_t pid, uint64_t stopped_ns)
{
	struct release *r = ctx;
	struct hold *h = r->h;
	uint64_t now, ns;
	bool expired;

	if (r->hook)
		r->hook(r->ctx, pid);
	/* Continued already by the watchdog (held past HOLD_MAX_NS: this loader was stopped,
	 * blocked, or slow to hook): hooked now, but it ran meanwhile. A process not stopped yet
	 * at a fresh hold is only on its way to the stop (the signal takes effect as its thread
	 * leaves the kernel), and runs no code of its own before it. */
	now = mono_ns();
	expired = stopped_ns && now > stopped_ns && now - stopped_ns >= HOLD_MAX_NS &&
		  proc_state(pid) != 'T';
	if (expired) {
		h->expired++;
		return;
	}
	if (kill((pid_t)pid, SIGCONT) && errno != ESRCH) {
		if (!h->failed++)
			fprintf(
			    stderr,
			    "tokenscope: cannot continue process %u, held at a library mapping: "
			    "%s\n",
			    pid, strerror(errno));
		return;
	}
	ns = stopped_ns && now > stopped_ns ? now - stopped_ns : 0;
	h->held++;
	h->total_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
	if (h->verbose)
		fprintf(stderr,
			"tokenscope: pid %u held %.3f ms at a library mapping until hooked\n", pid,
			(double)ns / 1e6);
}

bool hold_has(struct hold *h, uint32_t pid)
{
	return h->watchdog && kernel_held_has(h->k, pid);
}

void hold_release(struct hold *h, void (*hook)(void *ctx, uint32_t pid), void *ctx)
{
	struct release r = { h, hook, ctx };

	if (!h->watchdog)
		return;
	/* A watchdog gone (killed): nothing may be held without one. */
	if (waitpid(h->watchdog, NULL, WNOHANG) == h->watchdog) {
		kernel_hold_set(h->k, false);
		h->watchdog = 0;
		close(h->pipe_w);
		h->pipe_w = -1;
		fprintf(stderr, "tokenscope: the hold watchdog ended: processes that map a CUDA or "
				"TLS library are no longer held until hooked\n");
	}
	kernel_held_take(h->k, release_one, &r);
}

void hold_stop(struct hold *h, void (*hook)(void *ctx, uint32_t pid), void *ctx)
{
	struct release r = { h, hook, ctx };

	if (!h->watchdog)
		return;
	/* Off first: no new hold while what is held is let go. */
	kernel_hold_set(h->k, false);
	kernel_held_take(h->k, release_one, &r);
	close(h->pipe_w);
	h->pipe_w = -1;
	waitpid(h->watchdog, NULL, 0);
	h->watchdog = 0;
}
