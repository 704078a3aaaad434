/* SPDX-License-Identifier: MIT */
/*
 * tokenscope run: starts a command with the CUPTI injection library named in its environment,
 * traces it from its first instruction (the process is followed before it execs), forwards
 * the signals sent to tokenscope, and exits with the command's status.
 */
#ifndef TS_RUN_H
#define TS_RUN_H

#include <signal.h>

#include "loader/trace.h"

/* The variable the CUDA driver reads at initialisation to load an injection library. */
#define RUN_INJECTION_ENV "CUDA_INJECTION64_PATH"
/* Names the injection library when it is not next to the tokenscope binary. */
#define RUN_CUPTI_LIB_ENV "TOKENSCOPE_CUPTI_LIB"
#define RUN_CUPTI_LIB_NAME "libtokenscope_cupti.so"

/* Runs argv (argv[0] looked up in PATH) traced with the options o (o->pids must be empty).
 * Returns the exit status for tokenscope: the command's, 128 + N when signal N ended it, 127
 * when it could not be started, 1 when tracing failed before it started. */
int run_command(struct trace_opts *o, struct pipeline *pl, const struct trace_hooks *h,
		char *const argv[], volatile sig_atomic_t *exiting);

/* Where the injection library is: $TOKENSCOPE_CUPTI_LIB, else beside /proc/self/exe, else in
 * ../lib/tokenscope/ from there (make install's place). Returns 0 with the path in buf, or
 * -ENOENT (buf then holds the first path looked at). */
int run_find_cupti_lib(char *buf, size_t len);

#endif
