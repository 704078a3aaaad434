/* SPDX-License-Identifier: MIT */
/*
 * What this process may do, and why the kernel refused it something, in words: its effective
 * capabilities, and, where those are not the cause, a user namespace of its own, a seccomp
 * filter, kernel lockdown or the security modules active. The loader (trace.c) decides when a
 * refusal is said; these name what is missing when the programs cannot load, or when another
 * process's libraries cannot be read or hooked.
 */
#ifndef TS_LOADER_PRIVS_H
#define TS_LOADER_PRIVS_H

#include <stdbool.h>
#include <stdint.h>

struct uprobes_denial;

/* The effective capability set (a bit per CAP_*), and whether a seccomp filter is on; all
 * ones when /proc/self/status cannot be read, so that nothing is blamed on a capability. */
uint64_t privs_caps(bool *seccomp);
/* Whether caps (privs_caps) holds the capability cap (CAP_*). */
bool privs_has(uint64_t caps, int cap);
/* Says why the kernel refused to load the programs (err: -EPERM or -EACCES), naming what is
 * missing. */
void privs_explain_load(int err);
/* Says why a scan could not read or hook a library for want of a permission (uprobes.h: the
 * first such refusal), for a process with the capabilities caps: what is missing, or what
 * refused it, and what is not traced. */
void privs_explain_hook(uint64_t caps, const struct uprobes_denial *d);

#endif
