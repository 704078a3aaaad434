/* SPDX-License-Identifier: MIT */
/* The line that says a file output was written, where and how big. */
#ifndef TS_WRITTEN_H
#define TS_WRITTEN_H

#include <stdio.h>

/* "tokenscope: wrote WHAT to PATH (SIZE)" on f; nothing for "-" (standard output) or a path
 * that cannot be looked at. */
void say_written(FILE *f, const char *what, const char *path);

#endif
