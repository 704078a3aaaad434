// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/escape.h"
#include "lib/grow.h"
#include "lib/utf8.h"
#include "loader/proc.h"

int proc_check(uint32_t pid)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/%u", pid);
	return access(path, F_OK) == 0 ? 0 : -ESRCH;
}

ssize_t proc_read_file(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -errno;
	r = read(fd, buf, n - 1);
	close(fd);
	if (r < 0)
		return -errno;
	buf[r] = 0;
	return r;
}

void proc_comm(uint32_t pid, char *out, size_t n)
{
	char path[40], comm[PROC_COMM_BYTES + 2];

	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	if (proc_read_file(path, comm, sizeof(comm)) <= 0) {
		snprintf(out, n, "?");
		return;
	}
	/* A process names itself: escape sequences included. */
	utf8_clean(out, n, comm, strcspn(comm, "\n"));
}

/* A decimal pid at *s (digits only, 0 to PROC_PID_MAX), *s moved past it; false otherwise. */
static bool parse_pid(const char **s, uint32_t *out)
{
	const char *p = *s;
	uint32_t v = 0;

	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (uint32_t)(*p - '0');
		if (v > PROC_PID_MAX)
			return false;
	}
	*out = v;
	*s = p;
	return true;
}

int proc_parse_stat(const char *text, uint32_t *pid, uint32_t *ppid)
{
	/* "PID (COMM) STATE PPID ...": comm may hold spaces and parentheses, so the state
	 * follows the last ')'. */
	const char *close = strrchr(text, ')'), *p = text;

	if (!close || !parse_pid(&p, pid) || p[0] != ' ' || p[1] != '(' || p + 1 > close)
		return -EINVAL;
	p = close + 1;
	if (p[0] != ' ' || !p[1] || p[2] != ' ')
		return -EINVAL;
	p += 3;
	return parse_pid(&p, ppid) && (*p == ' ' || *p == '\n' || !*p) ? 0 : -EINVAL;
}

/* The state letter of a stat file's text: it follows the last ')', a comm may hold spaces and
 * parentheses. 0 when there is none. */
static char stat_state(const char *text)
{
	const char *close = strrchr(text, ')');

	return close && close[1] == ' ' ? close[2] : 0;
}

char proc_state(uint32_t pid)
{
	char path[40], text[512];

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	if (proc_read_file(path, text, sizeof(text)) <= 0)
		return 0;
	return stat_state(text);
}

int proc_read_stat(const char *proc_root, const char *name, uint32_t *pid, uint32_t *ppid)
{
	char path[300], text[512];
	const char *p = name;
	uint32_t dir_pid;

	if (!parse_pid(&p, &dir_pid) || *p)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/%s/stat", proc_root, name);
	if (proc_read_file(path, text, sizeof(text)) <= 0 || proc_parse_stat(text, pid, ppid) ||
	    *pid != dir_pid)
		return -EINVAL;
	return 0;
}

/* Hex digits into *v: false without one, or past 64 bits. */
static bool parse_hex(const char **s, uint64_t *v)
{
	const char *p = *s;
	uint64_t x = 0;
	int n = 0;

	for (;; p++, n++) {
		int d = *p >= '0' && *p <= '9'	 ? *p - '0'
			: *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
			: *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
						 : -1;

		if (d < 0)
			break;
		if (n == 16)
			return false;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	*s = p;
	return n > 0;
}

int proc_maps_parse(const char *line, struct proc_map *m)
{
	const char *p = line;
	uint64_t dev_major, dev_minor, ino;
	size_t n;

	memset(m, 0, sizeof(*m));
	if (!parse_hex(&p, &m->start) || *p++ != '-' || !parse_hex(&p, &m->end) || *p++ != ' ')
		return -EINVAL;
	if (strnlen(p, 5) < 5 || p[4] != ' ')
		return -EINVAL;
	m->exec = p[2] == 'x';
	p += 5;
	if (!parse_hex(&p, &m->offset) || *p++ != ' ' || !parse_hex(&p, &dev_major) ||
	    *p++ != ':' || !parse_hex(&p, &dev_minor) || *p++ != ' ')
		return -EINVAL;
	for (ino = 0; *p >= '0' && *p <= '9'; p++)
		ino = ino * 10 + (uint64_t)(*p - '0');
	m->inode = ino;
	while (*p == ' ')
		p++;
	/* The rest of the line is the path; the kernel writes a newline in a name as "\012", so
	 * the line's own newline ends it. A file gone since it was mapped has " (deleted)". */
	n = strcspn(p, "\n");
	if (n >= sizeof(m->path))
		return -ENAMETOOLONG;
	memcpy(m->path, p, n);
	m->path[n] = 0;
	escape_text_col(m->shown, sizeof(m->shown), m->path, PROC_MAP_SHOWN_CELLS, false);
	return 0;
}

struct pair {
	uint32_t pid, ppid;
};

int proc_descendants(const char *proc_root, uint32_t root, void (*cb)(void *ctx, uint32_t pid),
		     void *ctx)
{
	DIR *d = opendir(proc_root);
	struct pair *all = NULL, *m;
	size_t n = 0, cap = 0;
	uint32_t *todo = NULL;
	size_t head = 0, tail = 0;
	struct dirent *de;
	int found = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct pair p;

		if (!isdigit((unsigned char)de->d_name[0]) ||
		    proc_read_stat(proc_root, de->d_name, &p.pid, &p.ppid))
			continue; /* exited meanwhile */
		m = grow(all, &cap, n + 1, sizeof(*m), 512);
		if (!m) {
			found = -ENOMEM;
			goto out;
		}
		all = m;
		all[n++] = p;
	}
	todo = malloc((n + 1) * sizeof(*todo));
	if (!todo) {
		found = -ENOMEM;
		goto out;
	}
	todo[tail++] = root;
	while (head < tail) {
		uint32_t parent = todo[head++];

		for (size_t i = 0; i < n; i++) {
			if (all[i].ppid != parent || all[i].pid == root)
				continue;
			todo[tail++] = all[i].pid;
			all[i].ppid = 0; /* visit once */
			cb(ctx, all[i].pid);
			found++;
		}
	}
out:
	closedir(d);
	free(all);
	free(todo);
	return found;
}

/* Adds the local ports of the listening sockets in one /proc/PID/net/tcp{,6} file, with their
 * inodes, to ino/port (up to max); returns the new count. */
static int proc_listeners(const char *path, uint64_t *ino, uint16_t *port, int n, int max)
{
	FILE *f = fopen(path, "r");
	char line[512];

	if (!f)
		return n;
	/* "  sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid
	 * timeout inode": the state 0A is LISTEN. */
	while (n < max && fgets(line, sizeof(line), f)) {
		char local[64], remote[64];
		unsigned int st, p;
		unsigned long long inode;
		const char *colon;

		if (sscanf(line, " %*u: %63s %63s %x %*s %*s %*s %*u %*u %llu", local, remote, &st,
			   &inode) != 4 ||
		    st != 0x0A || !(colon = strrchr(local, ':')) ||
		    sscanf(colon + 1, "%x", &p) != 1)
			continue;
		ino[n] = inode;
		port[n++] = p;
	}
	fclose(f);
	return n;
}

#define PROC_LISTENERS_MAX 256

int proc_listen_ports(uint32_t pid, uint16_t *ports, int max)
{
	uint64_t ino[PROC_LISTENERS_MAX];
	uint16_t port[PROC_LISTENERS_MAX];
	char path[64], link[64];
	struct dirent *de;
	int n = 0, found = 0;
	DIR *d;

	/* The process's own network namespace: a container's sockets are not the host's. */
	snprintf(path, sizeof(path), "/proc/%u/net/tcp", pid);
	n = proc_listeners(path, ino, port, n, PROC_LISTENERS_MAX);
	snprintf(path, sizeof(path), "/proc/%u/net/tcp6", pid);
	n = proc_listeners(path, ino, port, n, PROC_LISTENERS_MAX);
	if (!n)
		return 0;
	snprintf(path, sizeof(path), "/proc/%u/fd", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while (found < max && (de = readdir(d))) {
		char fdpath[320];
		unsigned long long sock;
		ssize_t len;

		snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
		len = readlink(fdpath, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		if (sscanf(link, "socket:[%llu]", &sock) != 1)
			continue;
		for (int i = 0; i < n; i++) {
			bool dup = false;

			if (ino[i] != sock)
				continue;
			for (int k = 0; k < found; k++)
				dup |= ports[k] == port[i];
			if (!dup)
				ports[found++] = port[i];
		}
	}
	closedir(d);
	return found;
}

uint32_t proc_find_live(const char *proc_root, const char *comm)
{
	DIR *d = opendir(proc_root);
	size_t len = strlen(comm);
	struct dirent *e;
	uint32_t found = 0;

	if (!d)
		return 0;
	while (!found && (e = readdir(d))) {
		char path[300], stat[128], state;
		const char *open_paren, *close_paren;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "%s/%s/stat", proc_root, e->d_name);
		if (proc_read_file(path, stat, sizeof(stat)) <= 0)
			continue;
		/* "PID (COMM) STATE ...": the comm may hold parentheses, so the last ')' ends it */
		open_paren = strchr(stat, '(');
		close_paren = strrchr(stat, ')');
		state = stat_state(stat);
		if (!open_paren || !close_paren || close_paren < open_paren ||
		    (size_t)(close_paren - open_paren - 1) != len ||
		    memcmp(open_paren + 1, comm, len) || !state)
			continue;
		if (state != 'Z' && state != 'X')
			found = (uint32_t)strtoul(e->d_name, NULL, 10);
	}
	closedir(d);
	return found;
}
