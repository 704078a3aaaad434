/* SPDX-License-Identifier: MIT */
/*
 * Lines kept within a terminal's width, in one place: on a terminal, the summary and the
 * messages on stderr go through here. A line wider than the width (in display cells) is broken at
 * its last "; " or ", " that fits, else at its last space, and goes on on the next line with the
 * line's own indent plus four spaces (broken again as needed). A line with nowhere to break (a long
 * path) is left whole: cutting a word would change what it says; so is a line that starts with '{',
 * a JSON record.
 */
#ifndef TS_WRAP_H
#define TS_WRAP_H

#include <stddef.h>
#include <stdio.h>

/* The width tokenscope writes to: a 100-column terminal. */
#define WRAP_WIDTH 100

/* Writes len bytes of text to out, every line within width cells where it can break. */
void wrap_write(FILE *out, const char *text, size_t len, int width);
/* A stream whose lines go to under wrapped, each as soon as its newline is written (a last line
 * without one at close); NULL when under is no terminal (a log or a pipe keeps each message
 * whole, for grep; TOKENSCOPE_WRAP set wraps there too) or none can be made: then write to
 * under itself. Closing it leaves under open. */
FILE *wrap_open(FILE *under, int width);

#endif
