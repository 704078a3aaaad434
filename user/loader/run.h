/* SPDX-License-Identifier: MIT */
/*
 * tokenscope run: starts a command with each GPU vendor's device-time library (vendor.h: CUPTI's
 * injection library for CUDA) named in its environment, traces it from its first instruction
 * (the process is followed before it execs), forwards the signals sent to tokenscope, and exits
 * with the command's status.
 */
#ifndef TS_RUN_H
#define TS_RUN_H

#include <signal.h>
#include <stddef.h>

#include "loader/trace.h"
#include "loader/vendor.h"

/* Runs argv (argv[0] looked up in PATH) traced with the options o (o->pids must be empty).
 * Returns the exit status for tokenscope: the command's, 128 + N when signal N ended it, 127
 * when it could not be started, 1 when tracing failed before it started. */
int run_command(struct trace_opts *o, struct pipeline *pl, const struct trace_hooks *h,
		char *const argv[], volatile sig_atomic_t *exiting);

/* Where the device-time library d is: its path_env's value ($TOKENSCOPE_CUPTI_LIB), else its
 * file_name beside /proc/self/exe, else in ../lib/tokenscope/ from there (make install's place).
 * Returns 0 with the path in buf, or -ENOENT (buf then holds the first path looked at). */
int run_find_devtime_lib(const struct vendor_devtime *d, char *buf, size_t len);

#endif
