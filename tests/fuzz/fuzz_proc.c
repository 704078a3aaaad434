// SPDX-License-Identifier: MIT
/*
 * The loader's reading of /proc files a traced process controls (user/loader/proc.c,
 * user/loader/discover.c): a process names itself (comm), writes its own command line, picks
 * the names of the files it maps, and its container runtime names its cgroup. The input builds a
 * /proc tree of a few processes in a directory of the target's; discover_scan (`--all`),
 * discover_describe and proc_descendants (`-p PID`) read it; the rest of the input is lines of
 * /proc/PID/maps for proc_maps_parse.
 *
 * Input: u8 processes (at most FUZZ_PROCS), then for each: u8 pid (FUZZ_PID0 + its low 5 bits),
 * u8 ppid (the same), u8 flags (bit 0: the stat file's text comes from the input whole instead
 * of being built from the pid, comm and ppid; bit 1: no cmdline file), then NUL-ended strings:
 * comm, stat text (with bit 0), cmdline (its arguments separated by the byte 0x01, which becomes
 * the NUL the kernel writes), cgroup. Then maps lines to the end, split at newlines; the first
 * one also built into a well-formed line from its fields.
 *
 * Properties: discover_scan returns what it says (0 or -E2BIG, at most FUZZ_MAX found), in pid
 * order, each a process of the tree whose command line a rule matches, none with an ancestor
 * that matches (where every stat file was built, so the tree is known), its comm printable text
 * without a newline, its container id empty or 64 lowercase hex digits with the short id its
 * first 12; discover_describe agrees with the scan on the comm and container; proc_descendants
 * returns each descendant once; proc_parse_stat reads back the pid and ppid of every built stat
 * line whatever the comm holds; proc_maps_parse takes back the fields of a built line, and of
 * any line gives a path without a newline and a shown path that is printable text.
 */
#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_outputs.h"
#include "loader/discover.h"
#include "loader/proc.h"

#define FUZZ_PROCS 8
#define FUZZ_PID0 100
#define FUZZ_MAX 4
#define FUZZ_STRING_MAX 600

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fproc {
	uint32_t pid, ppid;
	bool raw_stat, no_cmdline, written;
	char *comm, *stat, *cmdline, *cgroup;
	size_t cmdline_len;
};

static void put_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		abort();
	if (n && fwrite(p, 1, n, f) != n)
		abort();
	fclose(f);
}

static void remove_tree(const char *root, struct fproc *p, int n)
{
	static const char *const files[] = { "stat", "comm", "cmdline", "cgroup" };
	char path[256];

	for (int i = 0; i < n; i++) {
		if (!p[i].written)
			continue;
		for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
			snprintf(path, sizeof(path), "%s/%u/%s", root, p[i].pid, files[f]);
			unlink(path);
		}
		snprintf(path, sizeof(path), "%s/%u", root, p[i].pid);
		rmdir(path);
	}
	rmdir(root);
}

static struct fproc *find(struct fproc *p, int n, uint32_t pid)
{
	for (int i = 0; i < n; i++)
		if (p[i].written && p[i].pid == pid)
			return &p[i];
	return NULL;
}

static bool is_server(const struct fproc *p)
{
	const char *rule;

	return !p->no_cmdline && p->cmdline_len &&
	       discover_match(p->cmdline, p->cmdline_len, p->comm, &rule) != NULL;
}

FUZZ_CHECKER static void check_found(const struct discovered *d, struct fproc *p, int n,
				     bool tree_known)
{
	struct fproc *me = find(p, n, d->pid), *a;
	size_t idlen = strlen(d->container_id);

	FUZZ_CHECK(me, "found pid %u, which is not in the tree", d->pid);
	FUZZ_CHECK(d->server && d->rule && d->runtime, "a found process without its rule");
	FUZZ_CHECK(is_server(me), "pid %u found, but no rule matches its command line", d->pid);
	FUZZ_CHECK(memchr(d->comm, 0, sizeof(d->comm)), "comm not terminated");
	fuzz_check_text("comm", d->comm, strlen(d->comm), NULL);
	FUZZ_CHECK(!strchr(d->comm, '\n'), "a newline in comm");
	FUZZ_CHECK(idlen == 0 || idlen == DISCOVER_ID_LEN, "a container id of %zu characters",
		   idlen);
	for (size_t i = 0; i < idlen; i++)
		FUZZ_CHECK((d->container_id[i] >= '0' && d->container_id[i] <= '9') ||
			       (d->container_id[i] >= 'a' && d->container_id[i] <= 'f'),
			   "container id \"%s\" is not lowercase hex", d->container_id);
	FUZZ_CHECK(!strncmp(d->container_short, d->container_id, DISCOVER_SHORT_LEN) &&
		       strlen(d->container_short) == (idlen ? DISCOVER_SHORT_LEN : 0),
		   "short id \"%s\" of \"%s\"", d->container_short, d->container_id);
	if (!tree_known)
		return;
	a = find(p, n, me->ppid);
	for (int depth = 0; a && depth < FUZZ_PROCS; depth++) {
		FUZZ_CHECK(!is_server(a), "pid %u found although its ancestor %u matches too",
			   d->pid, a->pid);
		a = find(p, n, a->ppid);
	}
}

static void count(void *ctx, uint32_t pid)
{
	uint32_t *seen = ctx;

	FUZZ_CHECK(pid >= FUZZ_PID0 && pid < FUZZ_PID0 + 32, "descendant %u not in the tree", pid);
	FUZZ_CHECK(!(seen[0] & 1u << (pid - FUZZ_PID0)), "descendant %u given twice", pid);
	seen[0] |= 1u << (pid - FUZZ_PID0);
}

FUZZ_CHECKER static void check_map(const char *line)
{
	struct proc_map m;

	if (proc_maps_parse(line, &m))
		return;
	FUZZ_CHECK(memchr(m.path, 0, sizeof(m.path)) && !strchr(m.path, '\n'),
		   "a path with a newline");
	FUZZ_CHECK(memchr(m.shown, 0, sizeof(m.shown)), "shown not terminated");
	fuzz_check_text("shown path", m.shown, strlen(m.shown), NULL);
}

/* A well-formed maps line from fields of the input: parsed back exactly. */
FUZZ_CHECKER static void check_built_map(struct fuzz_in *in, const char *path)
{
	uint64_t start = fuzz_u64(in), end = fuzz_u64(in), off = fuzz_u32(in);
	unsigned perms = fuzz_u8(in), ino = fuzz_u32(in);
	char line[5000];
	struct proc_map m;

	if (strchr(path, '\n') || strlen(path) > 4000 || path[0] == ' ')
		return;
	snprintf(line, sizeof(line),
		 "%" PRIx64 "-%" PRIx64 " %c%c%c%c %08" PRIx64 " %02x:%02x %u%s%s\n", start, end,
		 perms & 1 ? 'r' : '-', perms & 2 ? 'w' : '-', perms & 4 ? 'x' : '-',
		 perms & 8 ? 's' : 'p', off, perms >> 4, perms & 0xff, ino, path[0] ? "     " : "",
		 path);
	FUZZ_CHECK(proc_maps_parse(line, &m) == 0, "a well-formed line refused: %s", line);
	FUZZ_CHECK(m.start == start && m.end == end && m.offset == off && m.inode == ino &&
		       m.exec == !!(perms & 4),
		   "fields read back wrong from %s", line);
	FUZZ_CHECK(!strcmp(m.path, path), "path \"%s\" read back as \"%s\"", path, m.path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	int n = fuzz_u8(&in) % (FUZZ_PROCS + 1), rc;
	struct fproc p[FUZZ_PROCS];
	struct discovered found[FUZZ_MAX], d;
	bool tree_known = true;
	char root[128], dir[160], text[128];
	size_t nfound = 0;
	uint32_t seen = 0;
	static unsigned run;

	snprintf(root, sizeof(root), "%s/proc%u", fuzz_tmpdir(), run++);
	if (mkdir(root, 0755))
		abort();
	memset(p, 0, sizeof(p));
	for (int i = 0; i < n; i++) {
		uint8_t flags;

		p[i].pid = FUZZ_PID0 + (fuzz_u8(&in) & 31);
		p[i].ppid = FUZZ_PID0 + (fuzz_u8(&in) & 31);
		flags = fuzz_u8(&in);
		p[i].raw_stat = flags & 1;
		p[i].no_cmdline = flags & 2;
		p[i].comm = fuzz_str(&in, 15);
		p[i].stat = p[i].raw_stat ? fuzz_str(&in, FUZZ_STRING_MAX) : NULL;
		p[i].cmdline = fuzz_str(&in, FUZZ_STRING_MAX);
		p[i].cgroup = fuzz_str(&in, FUZZ_STRING_MAX);
		p[i].cmdline_len = strlen(p[i].cmdline);
		for (size_t k = 0; k < p[i].cmdline_len; k++)
			if (p[i].cmdline[k] == 1)
				p[i].cmdline[k] = 0;
		if (find(p, i, p[i].pid))
			continue; /* a pid once */
		if (!p[i].stat) {
			char *s;

			if (asprintf(&s, "%u (%s) S %u 1 1 0 -1\n", p[i].pid, p[i].comm,
				     p[i].ppid) < 0)
				abort();
			p[i].stat = s;
		}
		tree_known &= !p[i].raw_stat;
		snprintf(dir, sizeof(dir), "%s/%u", root, p[i].pid);
		if (mkdir(dir, 0755))
			abort();
		p[i].written = true;
		put_file(dir, "stat", p[i].stat, strlen(p[i].stat));
		put_file(dir, "comm", text,
			 (size_t)snprintf(text, sizeof(text), "%s\n", p[i].comm));
		if (!p[i].no_cmdline)
			put_file(dir, "cmdline", p[i].cmdline, p[i].cmdline_len);
		put_file(dir, "cgroup", p[i].cgroup, strlen(p[i].cgroup));
		if (!p[i].raw_stat) {
			uint32_t pid, ppid;

			FUZZ_CHECK(proc_parse_stat(p[i].stat, &pid, &ppid) == 0 &&
				       pid == p[i].pid && ppid == p[i].ppid,
				   "stat \"%s\" not read back", p[i].stat);
		}
	}

	rc = discover_scan(root, found, FUZZ_MAX, &nfound);
	FUZZ_CHECK(rc == 0 || rc == -E2BIG, "discover_scan returned %d", rc);
	FUZZ_CHECK(nfound <= FUZZ_MAX, "%zu found", nfound);
	for (size_t i = 0; i < nfound; i++) {
#ifdef FUZZ_SHOW
		printf("found %u (%s, rule '%s') comm \"%s\" container %s %s\n", found[i].pid,
		       found[i].server, found[i].rule, found[i].comm, found[i].container_short,
		       found[i].runtime);
#endif
		check_found(&found[i], p, n, tree_known);
		FUZZ_CHECK(i == 0 || found[i].pid > found[i - 1].pid, "not in pid order");
		if (discover_describe(root, found[i].pid, found[i].server, found[i].rule, &d) == 0)
			FUZZ_CHECK(!strcmp(d.comm, found[i].comm) &&
				       !strcmp(d.container_id, found[i].container_id),
				   "describe and scan disagree on pid %u", found[i].pid);
	}
	if (n) {
		rc = proc_descendants(root, p[0].pid, count, &seen);
		FUZZ_CHECK(rc >= 0 && rc == __builtin_popcount(seen), "%d descendants, %d seen", rc,
			   __builtin_popcount(seen));
	}
	remove_tree(root, p, n);

	/* The rest: lines of /proc/PID/maps. */
	if (in.n) {
		char *first = fuzz_str(&in, 4096);

		check_built_map(&in, first);
		check_map(first);
		free(first);
	}
	while (in.n) {
		const uint8_t *nl = memchr(in.p, '\n', in.n);
		size_t len = nl ? (size_t)(nl - in.p) + 1 : in.n, got;
		const uint8_t *b = fuzz_bytes(&in, len, &got);
		char *line = malloc(got + 1);

		if (!line)
			abort();
		memcpy(line, b, got);
		line[got] = 0;
		check_map(line);
		free(line);
	}
	for (int i = 0; i < n; i++) {
		free(p[i].comm);
		free(p[i].stat);
		free(p[i].cmdline);
		free(p[i].cgroup);
	}
	return 0;
}
