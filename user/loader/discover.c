// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/types.h>

#include "loader/discover.h"
#include "lib/grow.h"
#include "loader/proc.h"
#include "traffic.h"
#include "lib/utf8.h"

/* Server command lines are long (vLLM's run to a few hundred bytes); the rules look at the
 * first arguments and flags, so a truncated tail loses nothing they need. */
#define CMDLINE_BYTES 8192
#define MAX_ARGS 128
/* A cgroup file has one line per v1 hierarchy (about 13) plus the v2 line. */
#define CGROUP_BYTES 4096
/* Deeper than any real process tree: stops a walk on a pid cycle from a racing scan. */
#define MAX_DEPTH 64

static const char *argv_name(const char *s)
{
	const char *slash = strrchr(s, '/');

	return slash ? slash + 1 : s;
}

static bool is_interpreter(const char *name)
{
	return !strncmp(name, "python", 6) || !strcmp(name, "env") || !strcmp(name, "uv") ||
	       !strcmp(name, "sh") || !strcmp(name, "bash");
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcasecmp(s + a - b, suffix);
}

/* The module of `-m MOD` (or `-mMOD`), or NULL. */
static const char *module_of(char **argv, int argc)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") && i + 1 < argc)
			return argv[i + 1];
		if (!strncmp(argv[i], "-m", 2) && argv[i][2] != '-' && argv[i][2])
			return argv[i] + 2;
		if (argv[i][0] != '-')
			break; /* the script: what follows are its arguments */
	}
	return NULL;
}

static bool has_gguf_model(char **argv, int argc)
{
	bool model = false, gguf = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model") ||
		    !strncmp(argv[i], "--model=", 8))
			model = true;
		if (has_suffix(argv[i], ".gguf"))
			gguf = true;
	}
	return model && gguf;
}

const char *discover_match(const char *cmdline, size_t len, const char *comm, const char **rule)
{
	char buf[CMDLINE_BYTES], *argv[MAX_ARGS];
	const char *name, *mod, *sub;
	int argc = 0, at = 0;

	(void)comm; /* comm alone is not evidence (clients share it); kept for future rules */
	*rule = NULL;
	if (len >= sizeof(buf))
		len = sizeof(buf) - 1;
	memcpy(buf, cmdline, len);
	buf[len] = 0;
	for (size_t i = 0; i < len && argc < MAX_ARGS; i += strlen(buf + i) + 1)
		argv[argc++] = buf + i;
	if (!argc)
		return NULL; /* kernel threads and zombies */

	name = argv_name(argv[0]);
	if (is_interpreter(name) && argc > 1 && argv[1][0] != '-') {
		at = 1; /* `python3 /usr/local/bin/vllm serve`: a shebang script */
		name = argv_name(argv[1]);
	}
	sub = at + 1 < argc ? argv[at + 1] : "";
	mod = module_of(argv, argc);

	if (!strcmp(name, "vllm") && !strcmp(sub, "serve"))
		return *rule = "vllm serve", "vllm";
	if (mod && !strncmp(mod, "vllm.entrypoints.", 17))
		return *rule = "-m vllm.entrypoints", "vllm";
	if (mod && !strcmp(mod, "sglang.launch_server"))
		return *rule = "-m sglang.launch_server", "sglang";
	if (mod && !strncmp(mod, "sglang.srt.", 11))
		return *rule = "-m sglang.srt", "sglang";
	if (!strcmp(name, "text-generation-launcher") || !strcmp(name, "text-generation-router") ||
	    !strcmp(name, "text-generation-server"))
		return *rule = "text-generation-*", "tgi";
	if (!strcmp(name, "llama-server"))
		return *rule = "llama-server", "llama.cpp";
	if (!strcmp(name, "server") && has_gguf_model(argv, argc))
		return *rule = "server --model *.gguf", "llama.cpp";
	if (mod && !strcmp(mod, "llama_cpp.server"))
		return *rule = "-m llama_cpp.server", "llama.cpp";
	if (!strcmp(name, "ollama") && !strcmp(sub, "serve"))
		return *rule = "ollama serve", "ollama";
	return NULL;
}

static bool is_hex64(const char *s, size_t n)
{
	if (n != DISCOVER_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return true;
}

static const struct {
	const char *prefix, *runtime;
} runtimes[] = {
	{ "docker-", "docker" }, { "cri-containerd-", "containerd" }, { "crio-", "cri-o" },
	{ "libpod-", "podman" }, { "containerd-", "containerd" },
};

/* The container id of one path component (`cri-containerd-ID.scope`, `ID`), or false. */
static bool component_id(const char *c, size_t n, const char *parent, size_t pn, char *id,
			 const char **runtime)
{
	const char *rt = "";

	if (n > 6 && !strncmp(c + n - 6, ".scope", 6))
		n -= 6;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++) {
		size_t p = strlen(runtimes[i].prefix);

		if (n > p && !strncmp(c, runtimes[i].prefix, p)) {
			c += p, n -= p;
			rt = runtimes[i].runtime;
			break;
		}
	}
	if (!is_hex64(c, n))
		return false;
	if (!*rt && pn == 6 && !strncmp(parent, "docker", 6))
		rt = "docker";
	else if (!*rt && pn >= 8 && !strncmp(parent, "kubepods", 8))
		rt = "kubernetes";
	else if (!*rt && pn > 3 && !strncmp(parent, "pod", 3))
		rt = "kubernetes"; /* cgroupfs driver: /kubepods/burstable/podUID/ID */
	memcpy(id, c, n);
	id[n] = 0;
	*runtime = rt;
	return true;
}

static bool path_id(const char *path, size_t len, char *id, const char **runtime)
{
	const char *parent = "", *c = path, *end = path + len;
	size_t pn = 0;
	bool found = false;

	while (c < end) {
		const char *slash = memchr(c, '/', end - c);
		size_t n = (slash ? slash : end) - c;

		/* The deepest id wins: a container nested in another names the inner one last. */
		if (n && component_id(c, n, parent, pn, id, runtime))
			found = true;
		if (n)
			parent = c, pn = n;
		c += n + 1;
	}
	return found;
}

bool discover_cgroup_find(const char *text, bool (*found)(const char *path, size_t len, void *ctx),
			  void *ctx)
{
	/* cgroup v2 names the process's cgroup exactly: its line first. A host with v1
	 * hierarchies alone still lists "0::/": then each v1 hierarchy's path. */
	for (int v2 = 1; v2 >= 0; v2--) {
		for (const char *line = text; *line;) {
			size_t n = strcspn(line, "\n");
			const char *colon = memchr(line, ':', n);
			const char *path =
			    colon ? memchr(colon + 1, ':', n - (colon + 1 - line)) : NULL;

			if (path && (strncmp(line, "0::", 3) == 0) == v2 &&
			    found(path + 1, line + n - path - 1, ctx))
				return true;
			line += n + (line[n] == '\n');
		}
	}
	return false;
}

struct container_ctx {
	char *id;
	const char **runtime;
};

static bool container_in(const char *path, size_t len, void *ctx)
{
	struct container_ctx *c = ctx;

	return path_id(path, len, c->id, c->runtime);
}

bool discover_container(const char *text, char *id, const char **runtime)
{
	id[0] = 0;
	*runtime = "";
	return discover_cgroup_find(text, container_in, &(struct container_ctx){ id, runtime });
}

struct entry {
	uint32_t pid, ppid;
	const char *server, *rule;
};

static int by_pid(const void *a, const void *b)
{
	uint32_t x = ((const struct entry *)a)->pid, y = ((const struct entry *)b)->pid;

	return x < y ? -1 : x > y;
}

static const struct entry *find(const struct entry *all, size_t n, uint32_t pid)
{
	struct entry key = { .pid = pid };

	return bsearch(&key, all, n, sizeof(*all), by_pid);
}

static bool ancestor_matched(const struct entry *all, size_t n, const struct entry *e)
{
	const struct entry *p = e;

	for (int depth = 0; depth < MAX_DEPTH && p->ppid > 1; depth++) {
		p = find(all, n, p->ppid);
		if (!p)
			return false;
		if (p->server)
			return true;
	}
	return false;
}

static void describe_entry(const char *proc_root, const struct entry *e, struct discovered *d)
{
	char path[512], text[CGROUP_BYTES], comm[32];

	memset(d, 0, sizeof(*d));
	d->pid = e->pid;
	d->ppid = e->ppid;
	d->server = e->server;
	d->rule = e->rule;
	d->runtime = "";
	snprintf(path, sizeof(path), "%s/%u/comm", proc_root, e->pid);
	if (proc_read_file(path, comm, sizeof(comm)) <= 0)
		snprintf(comm, sizeof(comm), "?");
	utf8_clean(d->comm, sizeof(d->comm), comm, strcspn(comm, "\n"));
	snprintf(path, sizeof(path), "%s/%u/cgroup", proc_root, e->pid);
	if (proc_read_file(path, text, sizeof(text)) > 0 &&
	    discover_container(text, d->container_id, &d->runtime))
		snprintf(d->container_short, sizeof(d->container_short), "%.*s", DISCOVER_SHORT_LEN,
			 d->container_id);
}

int discover_describe(const char *proc_root, uint32_t pid, const char *server, const char *rule,
		      struct discovered *d)
{
	struct entry e = { .server = server, .rule = rule };
	char name[16];

	snprintf(name, sizeof(name), "%u", pid);
	if (proc_read_stat(proc_root, name, &e.pid, &e.ppid))
		return -ESRCH;
	describe_entry(proc_root, &e, d);
	return 0;
}

const char *discover_traffic_rule(unsigned int kind)
{
	switch (kind) {
	case TS_TRAFFIC_SSE:
		return "sse-traffic";
	case TS_TRAFFIC_NDJSON:
		return "ndjson-traffic";
	default:
		return NULL;
	}
}

/* One process: its ppid and, if it is a server, which. false when it exited meanwhile. */
static bool read_entry(const char *proc_root, const char *name, char *cmdline, struct entry *e)
{
	char path[512], comm[32];
	ssize_t len;

	if (proc_read_stat(proc_root, name, &e->pid, &e->ppid))
		return false;
	snprintf(path, sizeof(path), "%s/%s/comm", proc_root, name);
	if (proc_read_file(path, comm, sizeof(comm)) <= 0)
		comm[0] = 0;
	comm[strcspn(comm, "\n")] = 0;
	snprintf(path, sizeof(path), "%s/%s/cmdline", proc_root, name);
	len = proc_read_file(path, cmdline, CMDLINE_BYTES);
	e->server = len > 0 ? discover_match(cmdline, len, comm, &e->rule) : NULL;
	return true;
}

int discover_scan(const char *proc_root, struct discovered *out, size_t max, size_t *n)
{
	DIR *d = opendir(proc_root);
	struct entry *all = NULL, *m;
	size_t nall = 0, cap = 0;
	struct dirent *de;
	char *cmdline;
	int err = 0;

	*n = 0;
	if (!d)
		return -errno;
	cmdline = malloc(CMDLINE_BYTES);
	if (!cmdline) {
		closedir(d);
		return -ENOMEM;
	}
	while ((de = readdir(d))) {
		struct entry e;

		if (!isdigit((unsigned char)de->d_name[0]) ||
		    !read_entry(proc_root, de->d_name, cmdline, &e))
			continue;
		m = grow(all, &cap, nall + 1, sizeof(*m), 512);
		if (!m) {
			err = -ENOMEM;
			goto out;
		}
		all = m;
		all[nall++] = e;
	}
	if (nall)
		qsort(all, nall, sizeof(*all), by_pid);
	for (size_t i = 0; i < nall; i++) {
		if (!all[i].server || ancestor_matched(all, nall, &all[i]))
			continue;
		if (*n == max) {
			err = -E2BIG;
			break;
		}
		describe_entry(proc_root, &all[i], &out[(*n)++]);
	}
out:
	closedir(d);
	free(all);
	free(cmdline);
	return err;
}

void discover_set_init(struct discover_set *s)
{
	memset(s, 0, sizeof(*s));
}

void discover_set_free(struct discover_set *s)
{
	free(s->pids);
	memset(s, 0, sizeof(*s));
}

/* The index of pid, or of where it would go. */
static size_t set_pos(const struct discover_set *s, uint32_t pid)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->pids[mid] < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool discover_set_contains(const struct discover_set *s, uint32_t pid)
{
	size_t i = set_pos(s, pid);

	return i < s->n && s->pids[i] == pid;
}

int discover_set_add(struct discover_set *s, uint32_t pid)
{
	size_t i = set_pos(s, pid);
	uint32_t *m;

	if (i < s->n && s->pids[i] == pid)
		return 0;
	m = grow(s->pids, &s->cap, s->n + 1, sizeof(*m), 16);
	if (!m)
		return -ENOMEM;
	s->pids = m;
	memmove(s->pids + i + 1, s->pids + i, (s->n - i) * sizeof(*s->pids));
	s->pids[i] = pid;
	s->n++;
	return 1;
}

int discover_set_remove(struct discover_set *s, uint32_t pid)
{
	size_t i = set_pos(s, pid);

	if (i == s->n || s->pids[i] != pid)
		return 0;
	memmove(s->pids + i, s->pids + i + 1, (s->n - i - 1) * sizeof(*s->pids));
	s->n--;
	return 1;
}

bool discover_is_new(const struct discover_set *s, const struct discovered *d)
{
	return !discover_set_contains(s, d->pid);
}
