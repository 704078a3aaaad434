// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/perf_event.h>

#include "loader/tracefs.h"
#include "loader/proc.h"

static const char *const roots[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };

static const char *root;   /* where tracefs is, NULL when not usable */
static char group[48];	   /* tokenscope_PID_PIDNS */
static unsigned int nmade; /* events made: uN */
/* id -> N of each event made and not removed, to remove it by name */
static struct made {
	int id;
	unsigned int n;
} * made;
static size_t nmade_live, made_cap;

static int write_cmd(const char *text)
{
	char path[64];
	size_t len = strlen(text);
	int fd, err = 0;

	snprintf(path, sizeof(path), "%s/uprobe_events", root);
	fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len)
		err = errno ? -errno : -EIO;
	close(fd);
	return err;
}

static bool usable(const char *dir)
{
	char path[64];

	snprintf(path, sizeof(path), "%s/uprobe_events", dir);
	/* The effective ids and capabilities, which the write will be checked with. */
	return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

/* This process's pid namespace, as an inode number (0 when unknown): pids of two namespaces
 * may be equal, and tracefs is the whole machine's. */
static unsigned long pid_ns(void)
{
	char link[64];
	ssize_t n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
	unsigned long ino = 0;

	if (n > 0) {
		link[n] = 0;
		sscanf(link, "pid:[%lu]", &ino);
	}
	return ino;
}

/* Mounts tracefs on the usual place in a mount namespace of this process's own: the host's
 * mounts stay as they were. */
static int mount_private(void)
{
	if (unshare(CLONE_NEWNS))
		return -errno;
	/* Nothing mounted from here on propagates back to the namespace this one was copied
	 * from. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		return -errno;
	if (mount("tracefs", roots[0], "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
		return -errno;
	return usable(roots[0]) ? 0 : -ENOENT;
}

/* Removes the probes of tokenscopes that are gone: of this pid namespace (another's pids cannot
 * be looked at from here), whose pid is no tokenscope. One with a perf event still open is
 * refused by the kernel (EBUSY), whatever this decides. */
static void remove_stale(unsigned long ns)
{
	char path[64], line[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/uprobe_events", root);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned int pid, n;
		unsigned long their_ns;
		char comm[PROC_COMM_TEXT], cmd[96];

		if (sscanf(line, "%*c:tokenscope_%u_%lu/u%u ", &pid, &their_ns, &n) != 3 ||
		    their_ns != ns)
			continue;
		proc_comm(pid, comm, sizeof(comm));
		if (pid == (unsigned int)getpid() || !strcmp(comm, "tokenscope"))
			continue;
		snprintf(cmd, sizeof(cmd), "-:tokenscope_%u_%lu/u%u\n", pid, their_ns, n);
		write_cmd(cmd);
	}
	fclose(f);
}

int tracefs_init(void)
{
	struct rlimit nofile;
	unsigned long ns;
	int err = -ENOENT;

	if (root)
		return 0;
	/* A perf event per probe per traced process: the descriptors allowed, as many as may be. */
	if (!getrlimit(RLIMIT_NOFILE, &nofile) && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]) && !root; i++)
		if (usable(roots[i]))
			root = roots[i];
	if (!root) {
		err = mount_private();
		if (err)
			return err;
		root = roots[0];
	}
	ns = pid_ns();
	snprintf(group, sizeof(group), "tokenscope_%d_%lu", (int)getpid(), ns);
	remove_stale(ns);
	return 0;
}

bool tracefs_ready(void)
{
	return root != NULL;
}

/* Removes this process's event uN. */
static void remove_event(unsigned int n)
{
	char rm[96];

	snprintf(rm, sizeof(rm), "-:%s/u%u\n", group, n);
	write_cmd(rm);
}

static int read_id(unsigned int n)
{
	char path[96], text[32];

	snprintf(path, sizeof(path), "%s/events/%s/u%u/id", root, group, n);
	if (proc_read_file(path, text, sizeof(text)) <= 0)
		return -ENOENT;
	return atoi(text);
}

int tracefs_uprobe_add(const char *path, uint64_t off, bool ret, int *id)
{
	char *cmd;
	int err;

	if (!root)
		return -ENOTSUP;
	/* The command is split at white space: such a path cannot be given. */
	if (strpbrk(path, " \t\n\r"))
		return -EINVAL;
	if (nmade_live == made_cap) {
		size_t cap = made_cap ? 2 * made_cap : 64;
		struct made *m = realloc(made, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		made = m;
		made_cap = cap;
	}
	if (asprintf(&cmd, "%c:%s/u%u %s:0x%llx\n", ret ? 'r' : 'p', group, nmade, path,
		     (unsigned long long)off) < 0)
		return -ENOMEM;
	err = write_cmd(cmd);
	free(cmd);
	if (err)
		return err;
	*id = read_id(nmade);
	if (*id < 0) {
		remove_event(nmade);
		return *id;
	}
	made[nmade_live++] = (struct made){ *id, nmade++ };
	return 0;
}

void tracefs_uprobe_remove(int id)
{
	for (size_t i = 0; i < nmade_live; i++) {
		if (made[i].id != id)
			continue;
		remove_event(made[i].n);
		made[i] = made[--nmade_live];
		return;
	}
}

int tracefs_follow(int id, int pid)
{
	/* Disabled: the probe's filter lists the event from its creation, enabled or not, and
	 * the programs run from the probe, not from the event; an enabled one would be switched
	 * in and out with its task (and every inherited copy) at each context switch. */
	struct perf_event_attr a = {
		.type = PERF_TYPE_TRACEPOINT,
		.size = sizeof(a),
		.config = (uint64_t)id,
		.inherit = pid > 0,
		.disabled = 1,
	};
	int fd = (int)syscall(__NR_perf_event_open, &a, pid > 0 ? pid : getpid(), -1, -1,
			      PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

void tracefs_cleanup(void)
{
	while (nmade_live)
		tracefs_uprobe_remove(made[nmade_live - 1].id);
	free(made);
	made = NULL;
	made_cap = 0;
}
