/* SPDX-License-Identifier: MIT */
/*
 * Uprobes shared by every traced process, made in tracefs (uprobe_events), so that a process
 * forked after attach carries its parent's probes from its first instruction.
 *
 * Why: a uprobe bound to one process through the uprobe PMU (what libbpf attaches) is not
 * inherited: the kernel gives a forked child its parent's breakpoints in memory, and removes
 * them at the child's first hit, because no probe names the child. A uprobe event made in
 * tracefs is a tracepoint; a perf event opened on it for a process with `inherit` set is
 * copied into each child at fork (in copy_process, before the child runs), and the probe's
 * filter then admits the child: its calls run the BPF programs from the first. The event
 * stays with the task across exec, so a library the child maps later (the same file) gets its
 * breakpoints from the kernel at mmap, without tokenscope. The event is bound to the process's
 * main thread: children of that thread and of threads it starts later carry it; a fork by a
 * thread already running at attach does not, and that child is hooked when the fork's record
 * is read (milliseconds later). The events are opened disabled: the filter lists them all the
 * same, and a disabled event costs its task nothing at a context switch.
 *
 * The programs are attached once per probe, to a perf event bound to tokenscope itself, not to
 * the inherited events: an inherited copy that carries a program takes it off the probe for
 * everyone when its process exits. tokenscope is never a traced process, so its own calls of
 * these functions (its OTLP exporter's TLS) end at the programs' first check. Each traced process
 * then holds only a bare counting event (tracefs_follow), which adds it to the filter; a call
 * runs the programs once whichever events admit it.
 *
 * tracefs must be mounted: where it is not (a container, a minimal VM), tokenscope mounts it in
 * a mount namespace of its own, seen by no other process. Probes are named
 * tokenscope_PID_PIDNS/uN (PIDNS: the pid namespace's inode, as two containers' tokenscopes may
 * have one pid); probes of a tokenscope of the same pid namespace that died without removing
 * them are removed at the next start. Where none of this is possible, tracefs_ready() is false and
 * the loader uses per-process PMU probes as before, which a fork does not carry.
 */
#ifndef TS_TRACEFS_H
#define TS_TRACEFS_H

#include <stdbool.h>
#include <stdint.h>

/* Finds or mounts tracefs (call before any thread starts: a mount namespace is unshared by a
 * single-threaded process only) and removes dead tokenscopes' probes. 0, or -errno and
 * tracefs_ready() false. */
int tracefs_init(void);
bool tracefs_ready(void);
/* A uprobe event at off in path (a return probe when ret): *id is its tracepoint id for
 * perf_event_open. 0 or -errno (-ENOENT: no such file; -EINVAL: a path tracefs cannot take). */
int tracefs_uprobe_add(const char *path, uint64_t off, bool ret, int *id);
/* Removes the event made with that id (after every perf event on it is closed). */
void tracefs_uprobe_remove(int id);
/* A counting perf event on tracepoint id for process pid, inherited by its children; its fd
 * or -errno. pid 0: this process, not inherited (the programs' carrier). */
int tracefs_follow(int id, int pid);
/* Removes every event this process made (at exit). */
void tracefs_cleanup(void);

#endif
