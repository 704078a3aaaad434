/* SPDX-License-Identifier: MIT */
/*
 * `tokenscope check`: a preflight that says what this node can do, one line each, and what to do
 * about anything missing (docs/building.md, "Kernels"; docs/security.md for the capabilities).
 * It probes the kernel's features (features.h), loads and attaches the BPF programs as a trace
 * would and takes them off again, tries a uprobe on its own executable, and looks for tracefs,
 * the TLS and CUDA libraries, the CUPTI injection library, NVML, libcurl and the container
 * runtimes' state. Nothing is traced. Exit status: 0 when tracing can start, 1 when it cannot.
 */
#ifndef TS_LOADER_CHECK_H
#define TS_LOADER_CHECK_H

#include <stdbool.h>
#include <stdio.h>

/* Runs the checks, printing lines (or one JSON object with json) to out; 0 or 1. */
int check_run(FILE *out, bool json, bool verbose);

#endif
