/* SPDX-License-Identifier: MIT */
/*
 * Holding a traced process at its mapping of a library tokenscope hooks, so that no call into it
 * escapes the probes (docs/gpu.md, "A library mapped after attach"). The kernel side stops the
 * process (SIGSTOP) at the exit of the mmap that mapped the CUDA runtime or driver, OpenSSL or
 * the CUPTI injection library, before the thread returns to user space, and notes it in map
 * `held`; the loader puts the probes in (its callback) and continues it (SIGCONT).
 *
 * A held process must never stay stopped: holding is on only while a watchdog process runs,
 * forked here with nothing but the map's descriptor and a pipe from the loader. When the loader
 * ends in any way (an exit, a crash, SIGKILL), the pipe reads end of file and the watchdog
 * continues every process still in the map; and it continues a process held longer than a
 * second whatever the loader does (stopped by Ctrl-Z or a debugger, or blocked writing its
 * output), which the loader then counts as hooked late. Holding needs CAP_KILL (to continue a
 * process of another user); without it, or without the watchdog, nothing is held and a library
 * mapped after attach is hooked from the mapping's record a few milliseconds later, as before.
 */
#ifndef TS_LOADER_HOLD_H
#define TS_LOADER_HOLD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct kernel;

struct hold {
	struct kernel *k;
	pid_t watchdog; /* 0: none, and nothing is held */
	int pipe_w;	/* closed (or the loader gone): the watchdog continues what is held */
	bool verbose;
	/* Processes held and continued, and how long each was stopped (from the stop's kernel
	 * time to the continue) */
	uint64_t held, total_ns, max_ns;
	uint64_t failed;  /* continues the kernel refused: said once */
	uint64_t expired; /* continued by the watchdog before the loader could hook them */
};

/* Starts the watchdog and turns holding on; a negative errno (nothing held) when it cannot. */
int hold_start(struct hold *h, struct kernel *k, bool verbose);
/* Whether pid is held now (stopped at a mapping, not yet continued). */
bool hold_has(struct hold *h, uint32_t pid);
/* Every process held now: hook(ctx, pid) puts its probes in, then it is continued. */
void hold_release(struct hold *h, void (*hook)(void *ctx, uint32_t pid), void *ctx);
/* Holding off, everything held continued (hooked first when hook is given), the watchdog ended.
 * Safe to call when hold_start failed or was never called. */
void hold_stop(struct hold *h, void (*hook)(void *ctx, uint32_t pid), void *ctx);

#endif
