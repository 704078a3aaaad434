/* SPDX-License-Identifier: MIT */
/* Processes from /proc: existence, name, and the descendants of a process at attach time. */
#ifndef TS_PROC_H
#define TS_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads up to n - 1 bytes of a (small /proc) file into buf and NUL-terminates it; the length
 * read, or -errno. */
ssize_t proc_read_file(const char *path, char *buf, size_t n);
/* 0 when /proc/PID exists, -ESRCH when it does not. */
int proc_check(uint32_t pid);
/* The process's comm (or "?"). */
void proc_comm(uint32_t pid, char *out, size_t n);
/* Calls cb for every current descendant of root (not root itself). Returns how many, or -errno. */
int proc_descendants(uint32_t root, void (*cb)(void *ctx, uint32_t pid), void *ctx);
/* Parses "pid" and "ppid" out of the text of /proc/PID/stat; -EINVAL when malformed. */
int proc_parse_stat(const char *text, uint32_t *pid, uint32_t *ppid);

#endif
