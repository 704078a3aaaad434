/* SPDX-License-Identifier: MIT */
/*
 * Letting go of the kernel side without waiting for it. Removing a uprobe waits for an RCU
 * grace period, one probe after another (about 0.1 s each on the development VMs, 2 to 6 s for
 * the few dozen probes a run holds: the libraries of the ld.so cache, every traced process's),
 * and so did tokenscope's exit, silent, after its summary. Once tracing is over, a child
 * process takes every descriptor over (a fork shares them); this process then drops its own at
 * once (the last holder is the one that waits), and prints its summary and exits straight away.
 * The child closes the plain descriptors first (outputs, sockets: a pipe's reader sees the end,
 * a port is free again), then the BPF and perf ones, then removes tokenscope's tracefs events,
 * and exits; no signal from the terminal stops it half way. The probes stay until it has
 * closed them, writing to a ring buffer nobody reads (holding is off by then: hold.h). A
 * tokenscope started meanwhile waits for it before it probes (release_wait_earlier).
 */
#ifndef TS_LOADER_RELEASE_H
#define TS_LOADER_RELEASE_H

#include <stdio.h>

/* Forks the child that releases everything; then runs after() in it once the descriptors are
 * closed (tracefs events to remove). The child's pid: the child has it, and this process must
 * neither close nor destroy any of it (it drops its references when it exits); a negative
 * errno: nothing was handed over. */
int release_background(void (*after)(void));

/*
 * Before probing anything: waits while an earlier tokenscope's child (comm `tokenscope-exit`,
 * seen in proc_root) still removes its probes, for at most max_s seconds, saying so on err once
 * it has waited say_s. A probe put on a function while the kernel takes another one off the same
 * function can miss calls (Linux 6.18 lost TLS calls so), so the two never overlap. Returns 0,
 * or -ETIMEDOUT when one was still there at max_s (said; tracing goes on).
 */
int release_wait_earlier(const char *proc_root, double max_s, double say_s, FILE *err);

#endif
