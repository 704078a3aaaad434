/* SPDX-License-Identifier: MIT */
/* Processes from /proc: existence, name, and the descendants of a process at attach time. */
#ifndef TS_PROC_H
#define TS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lib/escape.h"

/* Reads up to n - 1 bytes of a (small /proc) file into buf and NUL-terminates it; the length
 * read, or -errno. */
ssize_t proc_read_file(const char *path, char *buf, size_t n);
/* 0 when /proc/PID exists, -ESRCH when it does not. */
int proc_check(uint32_t pid);
/* A comm's bytes (TASK_COMM_LEN - 1), and what they become as printable text (a byte may become
 * U+FFFD, 3 bytes). */
#define PROC_COMM_BYTES 15
#define PROC_COMM_TEXT (PROC_COMM_BYTES * 3 + 1)
/* The largest pid Linux gives (PID_MAX_LIMIT on 64-bit). */
#define PROC_PID_MAX (4u * 1024 * 1024)

/* The process's comm as printable text (utf8_clean: a process names itself, escape sequences
 * included), or "?"; n at least PROC_COMM_TEXT to hold any whole. */
void proc_comm(uint32_t pid, char *out, size_t n);
/* Calls cb for every current descendant of root (not root itself) in proc_root ("/proc", or a
 * tree of the tests'). Returns how many, or -errno. */
int proc_descendants(const char *proc_root, uint32_t root, void (*cb)(void *ctx, uint32_t pid),
		     void *ctx);
/* Parses "pid" and "ppid" out of the text of /proc/PID/stat ("PID (COMM) S PPID ..."; COMM may
 * hold anything but a NUL): both decimal, at most PROC_PID_MAX. -EINVAL when malformed. */
int proc_parse_stat(const char *text, uint32_t *pid, uint32_t *ppid);
/* The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, ...); 0 when it cannot be read. */
char proc_state(uint32_t pid);

/* The pid and ppid of the process whose directory in proc_root is name, from its stat file:
 * -EINVAL when name is not a pid, the file cannot be read (the process is gone) or parsed, or it
 * names another pid. */
int proc_read_stat(const char *proc_root, const char *name, uint32_t *pid, uint32_t *ppid);

/* A live process named comm (its whole comm) in proc_root: its pid, or 0 when there is none.
 * One that has exited and is not reaped yet (a zombie) is not live. */
uint32_t proc_find_live(const char *proc_root, const char *comm);

/* Display cells a mapped file's path is shown in, in a message. */
#define PROC_MAP_SHOWN_CELLS 160

/* One line of /proc/PID/maps. */
struct proc_map {
	uint64_t start, end, offset, inode;
	bool exec; /* mapped executable */
	/* The file as the process's mount namespace names it ("" for an anonymous mapping, or
	 * "[heap]" and the like): the bytes to open. shown is the same as printable text, cut
	 * to PROC_MAP_SHOWN_CELLS, for messages (a process names its files). */
	char path[4096 + 64];
	char shown[ESCAPE_COL_BYTES(PROC_MAP_SHOWN_CELLS)];
};

/* Parses a line of /proc/PID/maps ("START-END PERMS OFFSET MAJ:MIN INODE   PATH"): 0, -EINVAL
 * when it is not one, -ENAMETOOLONG when the path does not fit. */
int proc_maps_parse(const char *line, struct proc_map *m);

/* The TCP ports pid listens on (a socket in LISTEN among its open files), each once, up to max
 * into ports: how many, or -errno when its files cannot be listed. */
int proc_listen_ports(uint32_t pid, uint16_t *ports, int max);

#endif
