// SPDX-License-Identifier: MIT
#include <dlfcn.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <linux/capability.h>

#include "lib/clock.h"
#include "lib/dl.h"
#include "lib/jsonw.h"
#include "loader/check.h"
#include "loader/container.h"
#include "loader/features.h"
#include "loader/kernel.h"
#include "loader/proc.h"
#include "loader/run.h"
#include "loader/tracefs.h"
#include "loader/vendor.h"

/* The width of a line's name and state columns; details are cut to stay within 100 columns. */
#define CHECK_NAME_COLS 14
#define CHECK_DETAIL_COLS 78
#define CHECK_MAX 32

enum check_state { CHECK_OK, CHECK_OFF, CHECK_FAIL, CHECK_UNKNOWN };

static const char *const state_names[] = { "ok", "off", "FAIL", "?" };

struct check_item {
	char name[24];
	enum check_state state;
	char detail[320];
};

struct checks {
	struct check_item v[CHECK_MAX];
	int n;
	bool can_trace;
	struct features f;
	uint64_t caps;
};

static void add(struct checks *c, const char *name, enum check_state st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add(struct checks *c, const char *name, enum check_state st, const char *fmt, ...)
{
	struct check_item *it;
	va_list ap;

	if (c->n >= CHECK_MAX)
		return;
	it = &c->v[c->n++];
	snprintf(it->name, sizeof(it->name), "%s", name);
	it->state = st;
	va_start(ap, fmt);
	vsnprintf(it->detail, sizeof(it->detail), fmt, ap);
	va_end(ap);
	if (st == CHECK_FAIL)
		c->can_trace = false;
}

/* The effective capabilities; all ones when they cannot be read (nothing blamed on one). */
static uint64_t effective_caps(void)
{
	char text[4096], *p;
	uint64_t caps;

	if (proc_read_file("/proc/self/status", text, sizeof(text)) <= 0)
		return ~0ull;
	p = strstr(text, "\nCapEff:");
	if (!p || sscanf(p + 8, "%lx", &caps) != 1)
		return ~0ull;
	return caps;
}

static bool has_cap(const struct checks *c, int cap)
{
	return c->caps >> cap & 1;
}

static void check_kernel(struct checks *c)
{
	struct utsname u;

	uname(&u);
	if (c->f.btf)
		add(c, "kernel", CHECK_OK, "Linux %s %s, with BTF", u.release, u.machine);
	else
		add(c, "kernel", CHECK_FAIL,
		    "Linux %s %s has no BTF (/sys/kernel/btf/vmlinux): the programs cannot load; "
		    "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (every distribution's since "
		    "about 5.4)",
		    u.release, u.machine);
	for (size_t i = 0; i < features_count(); i++) {
		const struct feature_row *r = features_row(i);

		if (!c->f.probed)
			add(c, r->name, CHECK_UNKNOWN,
			    "Linux %s: not known, the kernel answers BPF probes only with CAP_BPF",
			    r->since);
		else if (features_has(&c->f, i))
			add(c, r->name, CHECK_OK, "Linux %s: %s", r->since, r->what);
		else
			add(c, r->name, CHECK_OFF, "Linux %s; instead: %s", r->since, r->without);
	}
}

static void check_caps(struct checks *c)
{
	static const struct {
		int cap;
		const char *name, *without;
		bool needed;
	} caps[] = {
		{ CAP_BPF, "CAP_BPF", "the programs cannot load", true },
		{ CAP_PERFMON, "CAP_PERFMON", "the tracing programs cannot load", true },
		{ CAP_SYS_ADMIN, "CAP_SYS_ADMIN",
		  "no GPU steps on Linux 6.16 and later (uprobes ask for it)", false },
		{ CAP_SYS_PTRACE, "CAP_SYS_PTRACE",
		  "no GPU steps of other users' and containers' processes, no Kubernetes names "
		  "through /proc/1/root",
		  false },
		{ CAP_KILL, "CAP_KILL",
		  "a process that maps a CUDA library after attach is not held until hooked "
		  "(its first calls may be missed)",
		  false },
	};
	bool admin = has_cap(c, CAP_SYS_ADMIN);

	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		/* CAP_SYS_ADMIN stands for CAP_BPF and CAP_PERFMON in the kernel's checks. */
		bool have = has_cap(c, caps[i].cap) || (caps[i].needed && admin);

		add(c, caps[i].name,
		    have	     ? CHECK_OK
		    : caps[i].needed ? CHECK_FAIL
				     : CHECK_OFF,
		    "%s", have ? "present" : caps[i].without);
	}
}

/* The file offset of the entry point of the ELF file at path: a place a uprobe may go. */
static int64_t entry_offset(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int64_t off = -1;
	GElf_Ehdr eh;
	Elf *e;
	size_t n;

	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (e && gelf_getehdr(e, &eh) && !elf_getphdrnum(e, &n)) {
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD &&
			    eh.e_entry >= ph.p_vaddr && eh.e_entry < ph.p_vaddr + ph.p_filesz) {
				off = (int64_t)(eh.e_entry - ph.p_vaddr + ph.p_offset);
				break;
			}
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	return off;
}

/*
 * What the syscall programs cost a process nobody traces: every syscall of every process on the
 * node runs them while tokenscope is attached (their filter stops it at once). Measured here on
 * this process, which is not traced: the fastest of CHECK_COST_RUNS runs of CHECK_COST_CALLS
 * calls each, a getppid (any syscall) and a 1-byte write and read on a socket pair (a socket
 * syscall, which the programs look at further).
 */
#define CHECK_COST_RUNS 7
#define CHECK_COST_CALLS 20000

struct syscall_ns {
	double getppid, socket;
};

static double fastest_ns(int fds[2])
{
	double best = 0;

	for (int r = 0; r < CHECK_COST_RUNS; r++) {
		uint64_t t0 = mono_ns();
		char b = 0;

		for (int i = 0; i < CHECK_COST_CALLS; i++) {
			if (!fds) {
				(void)!getppid();
			} else if (write(fds[0], &b, 1) != 1 || read(fds[1], &b, 1) != 1) {
				return -1;
			}
		}
		double ns = (double)(mono_ns() - t0) / CHECK_COST_CALLS;

		if (!r || ns < best)
			best = ns;
	}
	return best;
}

static void syscall_times(struct syscall_ns *t, int fds[2])
{
	t->getppid = fastest_ns(NULL);
	t->socket = fds[0] >= 0 ? fastest_ns(fds) : -1;
}

/* The cost line: untraced syscalls with the programs attached against before attach and after
 * their removal (the mean of the two, so that a drift of the machine's speed counts half). */
static void add_cost(struct checks *c, const struct syscall_ns *before, const struct syscall_ns *on,
		     const struct syscall_ns *after, bool batches)
{
	double g = on->getppid - (before->getppid + after->getppid) / 2;
	double s = on->socket - (before->socket + after->socket) / 2;
	char socket[64] = "";

	if (before->socket >= 0 && on->socket >= 0 && after->socket >= 0)
		snprintf(socket, sizeof(socket), ", %+.0f ns per socket write and read", s);
	add(c, "cost", CHECK_OK,
	    "a process nobody traces pays %+.0f ns per syscall (getppid)%s while tokenscope is "
	    "attached (measured now)%s",
	    g, socket, batches ? "; traced records are batched per CPU" : "");
}

/* The programs loaded and attached as a trace would, a uprobe tried, and all taken off. */
static void check_programs(struct checks *c)
{
	struct kernel_config kc = { .capture_bytes = 4096,
				    .self_tgid = (uint32_t)getpid(),
				    .ring_mb = 1,
				    .features = c->f };
	struct kernel *k = NULL;
	struct bpf_link *link = NULL;
	struct syscall_ns before, on, after;
	int fds[2] = { -1, -1 }, why_not;
	bool batches;
	int64_t entry;
	int err;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
		fds[0] = fds[1] = -1;
	err = kernel_open(&k, &c->f) ?: kernel_configure(k, &kc) ?: kernel_load(k);
	if (err) {
		add(c, "programs", CHECK_FAIL,
		    "the kernel refused the BPF programs (%s): tokenscope check -v shows the "
		    "verifier's log",
		    strerror(-err));
		kernel_destroy(k);
		goto out;
	}
	add(c, "programs", CHECK_OK, "loaded, adapted to this kernel's features");
	batches = kernel_batches_possible(k);
	syscall_times(&before, fds);
	err = kernel_attach(k);
	if (err) {
		add(c, "syscalls", CHECK_FAIL, "cannot attach to the syscall tracepoints: %s",
		    strerror(-err));
		kernel_destroy(k);
		goto out;
	}
	syscall_times(&on, fds);
	if (kernel_syscall_fentry(k, &why_not))
		add(c, "syscalls", CHECK_OK,
		    "socket reads and writes of traced processes (fentry/fexit on the syscalls' "
		    "own functions), forks, exits");
	else
		add(c, "syscalls", CHECK_OK,
		    "socket reads and writes of traced processes (raw syscall tracepoints; fentry "
		    "on the syscalls' functions: %s), forks, exits",
		    why_not == -EPERM && c->f.forced ? "turned off" : strerror(-why_not));
	add(c, "arrivals", c->f.rx_ready ? CHECK_OK : CHECK_OFF, "%s",
	    c->f.rx_ready ? "when requests reach the socket (received_ns, socket_wait_ms)"
			  : "no sk_data_ready tracepoint: received_ns and socket_wait_ms are null");
	err = kernel_exec_map_err(k);
	add(c, "mappings", err ? CHECK_OFF : CHECK_OK, "%s%s%s",
	    err ? "the mmap tracepoints cannot be attached (" : "a library mapped after attach is ",
	    err			   ? strerror(-err)
	    : has_cap(c, CAP_KILL) ? "held until hooked"
				   : "hooked at once",
	    err ? "): a library mapped later is found by the once-a-second scan" : "");
	entry = entry_offset("/proc/self/exe");
	err = entry < 0 ? -ENOEXEC
			: kernel_attach_uprobe(k, KERNEL_CUDA_SYNC, getpid(), "/proc/self/exe",
					       (uint64_t)entry, NULL, 0, &link);
	kernel_link_destroy(link);
	if (err)
		add(c, "uprobes", CHECK_OFF,
		    "a uprobe cannot be attached (%s)%s: no GPU steps, no TLS plaintext",
		    strerror(-err),
		    err == -EPERM || err == -EACCES ? ", Linux 6.16 and later ask for CAP_SYS_ADMIN"
						    : "");
	else
		add(c, "uprobes", CHECK_OK, "CUDA and TLS library calls can be hooked");
	kernel_destroy(k);
	syscall_times(&after, fds);
	add_cost(c, &before, &on, &after, batches);
out:
	if (fds[0] >= 0) {
		close(fds[0]);
		close(fds[1]);
	}
}

/* The first path in the dynamic loader's cache whose file name starts with prefix. */
static bool ld_cache_find(const char *prefix, char *out, size_t n)
{
	int fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	bool found = false;

	if (fd < 0)
		return false;
	if (fstat(fd, &st) || st.st_size <= 0 || st.st_size > (16 << 20) ||
	    !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return false;
	}
	if (read(fd, buf, (size_t)st.st_size) == st.st_size) {
		buf[st.st_size] = 0;
		for (off_t i = 0; i < st.st_size && !found; i++) {
			const char *s = buf + i, *base;

			if (*s != '/' || (i && buf[i - 1]))
				continue;
			base = strrchr(s, '/') + 1;
			if (!strncmp(base, prefix, strlen(prefix))) {
				snprintf(out, n, "%s", s);
				found = true;
			}
			i += (off_t)strlen(s);
		}
	}
	free(buf);
	close(fd);
	return found;
}

/* Whether the dynamic loader can open soname (a dynamic tokenscope only). */
static bool can_load(const char *soname)
{
	void *h;

	if (!dl_possible())
		return false;
	h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
	if (h)
		dlclose(h);
	return h != NULL;
}

/* A GPU vendor's lines: its libraries, its device-time library, its sampler's. */
static void check_vendor(struct checks *c, const struct vendor *v)
{
	const struct sampler_ops *s = v->sampler;
	char path[4096], lib[4096];
	bool cached = false;

	for (size_t i = 0; i < v->nlibs && !cached; i++)
		cached = v->libs[i].file_prefix &&
			 ld_cache_find(v->libs[i].file_prefix, path, sizeof(path));
	if (cached)
		add(c, v->check_name, CHECK_OK, "GPU steps from %.200s and any copy a server maps",
		    path);
	else
		add(c, v->check_name, CHECK_OK,
		    "no %s library in the ld.so cache: the copy an engine maps (a wheel's) is "
		    "hooked when it maps it",
		    v->name);
	if (v->devtime.file_name && run_find_devtime_lib(&v->devtime, lib, sizeof(lib)) == 0)
		add(c, v->devtime.check_name, CHECK_OK,
		    "device times with `tokenscope run` (%.200s)", lib);
	else if (v->devtime.file_name)
		add(c, v->devtime.check_name, CHECK_OFF,
		    "no %s beside tokenscope (or %s): GPU steps without device times",
		    v->devtime.file_name, v->devtime.path_env);
	if (s && !dl_possible())
		add(c, s->check_name, CHECK_OFF, "%s: no GPU utilisation or memory", DL_STATIC_WHY);
	else if (s)
		add(c, s->check_name, can_load(s->library) ? CHECK_OK : CHECK_OFF, "%s",
		    can_load(s->library) ? s->check_ok : s->check_off);
}

static void check_libraries(struct checks *c)
{
	char path[4096];
	struct container_dirs dirs;
	int found = 0;

	if (ld_cache_find("libssl.so", path, sizeof(path)))
		add(c, "openssl", CHECK_OK, "TLS plaintext from %.200s and any copy a server maps",
		    path);
	else
		add(c, "openssl", CHECK_OK,
		    "no libssl in the ld.so cache: a copy a server maps is hooked all the same");
	add(c, "go-tls",
	    dl_possible() ? (can_load("libcapstone.so.4") ? CHECK_OK : CHECK_OFF) : CHECK_OK, "%s",
	    !dl_possible() || can_load("libcapstone.so.4")
		? "Go's crypto/tls plaintext (its RET instructions found with capstone)"
		: "no libcapstone.so.4 (Debian: libcapstone4): no plaintext of Go TLS servers");
	for (size_t i = 0; i < vendor_count(); i++)
		check_vendor(c, vendor_row(i));
	if (!dl_possible())
		add(c, "otlp", CHECK_OFF, "%s: --otlp file:PATH only", DL_STATIC_WHY);
	else
		add(c, "otlp",
		    can_load("libcurl.so.4") || can_load("libcurl-gnutls.so.4") ? CHECK_OK
										: CHECK_OFF,
		    "%s",
		    can_load("libcurl.so.4") || can_load("libcurl-gnutls.so.4")
			? "--otlp to a collector (libcurl)"
			: "no libcurl.so.4 (Debian: libcurl4): --otlp file:PATH only");
	container_dirs_init(&dirs, NULL, 0);
	path[0] = 0;
	for (size_t i = 0; i < dirs.n; i++) {
		if (access(dirs.dir[i], R_OK | X_OK))
			continue;
		if (found++ < 2)
			snprintf(path + strlen(path), sizeof(path) - strlen(path), "%s%s",
				 found > 1 ? ", " : "", dirs.dir[i]);
	}
	add(c, "containers", found ? CHECK_OK : CHECK_OFF, "%s%s",
	    found ? "Kubernetes names from the runtime's state: " : "",
	    found ? path
		  : "no container runtime state found (/run/containerd, /run/containers/storage): "
		    "no pod names (--container-state DIR)");
}

static void print_text(const struct checks *c, FILE *out)
{
	fprintf(out, "tokenscope check: what this node can do\n");
	for (int i = 0; i < c->n; i++) {
		const struct check_item *it = &c->v[i];
		const char *d = it->detail;
		size_t len = strlen(d);

		fprintf(out, "  %-*s %-4s ", CHECK_NAME_COLS, it->name, state_names[it->state]);
		/* The detail wrapped at a space within the width, continued under itself. */
		while (len > CHECK_DETAIL_COLS) {
			size_t cut = CHECK_DETAIL_COLS;

			while (cut > 0 && d[cut] != ' ')
				cut--;
			if (!cut)
				cut = CHECK_DETAIL_COLS;
			fprintf(out, "%.*s\n  %-*s      ", (int)cut, d, CHECK_NAME_COLS, "");
			d += cut + (d[cut] == ' ');
			len = strlen(d);
		}
		fprintf(out, "%s\n", d);
	}
	fprintf(out, "%s\n",
		c->can_trace ? "tracing can start here" : "tracing cannot start here (FAIL above)");
	for (int i = 0; i < c->n; i++)
		if (!strncmp(c->v[i].name, "CAP_", 4) && c->v[i].state != CHECK_OK) {
			fprintf(out,
				"a capability missing: add it to the container's securityContext "
				"(capabilities.add),\n  to the binary (setcap), or run as root: "
				"docs/security.md\n");
			break;
		}
}

static void print_json(const struct checks *c, FILE *out)
{
	struct jsonw w;

	jsonw_begin(&w, out);
	jsonw_bool(&w, "can_trace", c->can_trace);
	jsonw_str(&w, "kernel", c->f.release);
	jsonw_arr_begin(&w, "features");
	for (size_t i = 0; i < features_count(); i++) {
		const struct feature_row *r = features_row(i);

		jsonw_obj_begin(&w, NULL);
		jsonw_str(&w, "name", r->name);
		jsonw_str(&w, "state",
			  !c->f.probed		   ? "unknown"
			  : features_has(&c->f, i) ? "on"
						   : "off");
		jsonw_str(&w, "since", r->since);
		jsonw_str(&w, "what", r->what);
		jsonw_str(&w, "without", r->without);
		if (r->lost)
			jsonw_str(&w, "lost", r->lost);
		else
			jsonw_null(&w, "lost");
		jsonw_obj_end(&w);
	}
	jsonw_arr_end(&w);
	jsonw_arr_begin(&w, "checks");
	for (int i = 0; i < c->n; i++) {
		jsonw_obj_begin(&w, NULL);
		jsonw_str(&w, "name", c->v[i].name);
		jsonw_str(&w, "state",
			  c->v[i].state == CHECK_UNKNOWN ? "unknown" : state_names[c->v[i].state]);
		jsonw_str(&w, "detail", c->v[i].detail);
		jsonw_obj_end(&w);
	}
	jsonw_arr_end(&w);
	jsonw_end(&w);
	fputc('\n', out);
}

int check_run(FILE *out, bool json, bool verbose)
{
	struct checks *c = calloc(1, sizeof(*c));
	int err, rc;

	if (!c)
		return 1;
	c->can_trace = true;
	kernel_log_verbose(verbose);
	features_probe(&c->f);
	c->caps = effective_caps();
	/* As a trace does, before anything: tracefs may be mounted in a namespace of our own. */
	err = tracefs_init();
	check_kernel(c);
	check_caps(c);
	add(c, "tracefs", err ? CHECK_OFF : CHECK_OK, "%s%s%s",
	    err ? "not usable ("
		: "uprobe events shared by every traced process, inherited at fork",
	    err ? strerror(-err) : "",
	    err ? "): probes per process, a forked child hooked when its fork is read" : "");
	if (c->f.btf)
		check_programs(c);
	tracefs_cleanup();
	check_libraries(c);
	if (json)
		print_json(c, out);
	else
		print_text(c, out);
	rc = c->can_trace ? 0 : 1;
	free(c);
	return rc;
}
