// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>

#include "loader/uprobes.h"
#include "loader/elf.h"
#include "events.h"
#include "loader/kernel.h"
#include "loader/proc.h"
#include "loader/tracefs.h"
#include "loader/vendor.h"

#define TLS_CALL(name, kind)                                \
	{                                                   \
		name, kind, KERNEL_TLS_CALL, KERNEL_TLS_RET \
	}

/* OpenSSL's (and BoringSSL's) plaintext calls: libssl.so.3 and .so.1.1, or an executable that
 * links the library in (Node's). */
static const struct libhooks_fn tls_fns[] = {
	TLS_CALL("SSL_read", TS_TLS_READ),
	TLS_CALL("SSL_read_ex", TS_TLS_READ_EX),
	TLS_CALL("SSL_write", TS_TLS_WRITE),
	TLS_CALL("SSL_write_ex", TS_TLS_WRITE_EX),
	TLS_CALL("SSL_do_handshake", TS_TLS_HANDSHAKE),
};

/* Go's crypto/tls in a Go executable (register ABI, x86-64 or arm64): Read's entry and each of
 * its RET instructions in place of its return; Write's and Close's entries alone (gotls.bpf.h
 * says why). */
static const struct libhooks_fn go_tls_fns[] = {
	{ "crypto/tls.(*Conn).Read", TS_TLS_GO_READ, KERNEL_GO_TLS_CALL, KERNEL_GO_TLS_RET },
	{ "crypto/tls.(*Conn).Write", TS_TLS_GO_WRITE, KERNEL_GO_TLS_CALL, KERNEL_PROBE_NONE },
	{ "crypto/tls.(*Conn).Close", TS_TLS_GO_CLOSE, KERNEL_GO_TLS_CALL, KERNEL_PROBE_NONE },
};

/* The TLS libraries looked for, by the start of their file name, or in an executable alone. */
static const struct libhooks tls_tables[] = {
	{ "TLS", "TLS plaintext", "libssl.so", true, LIBHOOKS_FNS(tls_fns) },
	{ "TLS", "TLS plaintext", NULL, true, LIBHOOKS_FNS(go_tls_fns) },
};

/*
 * The i-th library looked for: every GPU vendor's (vendor.h), in the registry's order, then the
 * TLS libraries; NULL past the last. An executable is looked into for every table that exe_too
 * says may be linked in statically.
 */
static const struct libhooks *table_at(size_t i)
{
	for (size_t v = 0; v < vendor_count(); v++) {
		const struct vendor *vr = vendor_row(v);

		if (i < vr->nlibs)
			return &vr->libs[i];
		i -= vr->nlibs;
	}
	return i < sizeof(tls_tables) / sizeof(tls_tables[0]) ? &tls_tables[i] : NULL;
}

void uprobes_init(struct uprobes *u, struct kernel *k, bool verbose)
{
	memset(u, 0, sizeof(*u));
	u->k = k;
	u->verbose = verbose;
	u->shared = tracefs_ready();
}

/* The hook of pid in file (-1 - v: vendor v's device-time library's probes), or NULL. */
static struct uprobes_hook *hook_find(struct uprobes *u, uint32_t pid, int file)
{
	for (int i = 0; i < u->nhooks; i++)
		if (u->hooks[i].pid == pid && u->hooks[i].file == file)
			return &u->hooks[i];
	return NULL;
}

/* A new hook without links; NULL when UPROBES_MAX_HOOKS are in use (said once) or there is no
 * memory. Kept even if nothing attaches: a process is tried once per file. */
static struct uprobes_hook *hook_new(struct uprobes *u, uint32_t pid, int file)
{
	struct uprobes_hook *h;

	if (!u->hooks && !(u->hooks = calloc(UPROBES_MAX_HOOKS, sizeof(*u->hooks))))
		return NULL;
	if (u->nhooks == UPROBES_MAX_HOOKS) {
		if (!u->hooks_full)
			fprintf(stderr,
				"tokenscope: %d (process, library) pairs hooked, the most kept: "
				"the CUDA and TLS calls of pid %u and of later processes are not "
				"traced\n",
				UPROBES_MAX_HOOKS, pid);
		u->hooks_full = true;
		return NULL;
	}
	h = &u->hooks[u->nhooks++];
	memset(h, 0, sizeof(*h));
	h->pid = pid;
	h->file = file;
	return h;
}

static void hook_unlink(struct uprobes_hook *h)
{
	for (int i = 0; i < h->nlinks; i++)
		kernel_link_destroy(h->links[i]);
	h->nlinks = 0;
	for (int i = 0; i < h->nfds; i++)
		close(h->fds[i]);
	h->nfds = 0;
}

/*
 * Attaches fn for h's process alone: at off in the file, or (off 0: the file's symbols could
 * not be read here) wherever libbpf finds it by name; at its return too where its table says.
 */
/* Probes each RET instruction of the function at off (size bytes) for h's process, after the
 * entry's link; 0, or -errno with none of them attached. */
static int hook_rets(struct uprobes *u, struct uprobes_hook *h, const char *path,
		     const struct libhooks_fn *fn, uint64_t off, uint64_t size)
{
	uint32_t rets[UPROBES_HOOK_LINKS];
	int n = elf_fn_rets(path, off, size, rets, UPROBES_HOOK_LINKS), first = h->nlinks, err = 0;

	if (n <= 0 || h->nlinks + n > UPROBES_HOOK_LINKS)
		return n < 0 ? n : -E2BIG;
	for (int i = 0; i < n && !err; i++) {
		struct bpf_link *l;

		err = kernel_attach_uprobe(u->k, fn->ret, (int)h->pid, path, off + rets[i], NULL,
					   fn->cookie, &l);
		if (!err)
			h->links[h->nlinks++] = l;
	}
	if (err) {
		while (h->nlinks > first)
			kernel_link_destroy(h->links[--h->nlinks]);
	}
	return err;
}

/* fn at off (size bytes), its entry probed skip bytes in (uprobes_file.skips). */
static int hook_fn(struct uprobes *u, struct uprobes_hook *h, const char *path,
		   const struct libhooks_fn *fn, uint64_t off, uint64_t size, uint32_t skip)
{
	const char *name = off ? NULL : fn->name;
	struct bpf_link *l, *r = NULL;
	int pid = (int)h->pid, err;

	if (h->nlinks + 2 > UPROBES_HOOK_LINKS)
		return -E2BIG;
	err = kernel_attach_uprobe(u->k, fn->entry, pid, path, off ? off + skip : 0, name,
				   fn->cookie, &l);
	if (err)
		return err;
	if (fn->ret == KERNEL_GO_TLS_RET) {
		h->links[h->nlinks++] = l;
		err = off ? hook_rets(u, h, path, fn, off, size) : -ENOENT;
		if (err)
			kernel_link_destroy(h->links[--h->nlinks]);
		return err;
	}
	if (fn->ret != KERNEL_PROBE_NONE) {
		err = kernel_attach_uprobe(u->k, fn->ret, pid, path, off, name, fn->cookie, &r);
		if (err) {
			kernel_link_destroy(l);
			return err;
		}
	}
	h->links[h->nlinks++] = l;
	if (r)
		h->links[h->nlinks++] = r;
	return 0;
}

/* One shared probe of cf at off: its tracefs event, and the program attached to it through a
 * perf event bound to tokenscope. */
static int probe_add(struct uprobes *u, struct uprobes_file *cf, const char *path,
		     enum kernel_probe probe, uint64_t off, uint32_t cookie)
{
	int i = cf->nprobes, id, fd, err;
	struct bpf_link *l;

	if (i == UPROBES_HOOK_LINKS)
		return -E2BIG;
	err = tracefs_uprobe_add(path, off, kernel_probe_is_ret(probe), &id);
	if (err)
		return err;
	fd = tracefs_follow(id, 0);
	if (fd < 0) {
		tracefs_uprobe_remove(id);
		return fd;
	}
	err = kernel_attach_perf_event(u->k, probe, fd, cookie, &l);
	if (err) {
		close(fd);
		tracefs_uprobe_remove(id);
		return err;
	}
	cf->ids[i] = id;
	cf->carried[i] = l;
	cf->nprobes++;
	return 0;
}

/* The link owns its carrier's perf event: destroying it closes that descriptor (closed again
 * here, it could be another thread's by then). */
static void probes_remove(struct uprobes_file *cf, int from)
{
	while (cf->nprobes > from) {
		int i = --cf->nprobes;

		kernel_link_destroy(cf->carried[i]);
		tracefs_uprobe_remove(cf->ids[i]);
	}
}

/* The file's probes, shared by every process, made once (at its first hook); 0, or -errno
 * with none made (nprobes -1: the file is hooked per process, as without tracefs). */
static int file_probes(struct uprobes *u, struct uprobes_file *cf, const char *path)
{
	int err = 0;

	if (cf->nprobes)
		return cf->nprobes < 0 ? -ENOTSUP : 0;
	if (cf->by_name) {
		cf->nprobes = -1;
		return -ENOTSUP;
	}
	for (size_t i = 0; i < cf->table->n; i++) {
		const struct libhooks_fn *fn = &cf->table->fns[i];
		uint64_t off = cf->offs[i];
		int first = cf->nprobes;

		if (!off)
			continue;
		err = probe_add(u, cf, path, fn->entry, off + cf->skips[i], fn->cookie);
		if (!err && fn->ret == KERNEL_GO_TLS_RET) {
			uint32_t rets[UPROBES_HOOK_LINKS];
			int n = elf_fn_rets(path, off, cf->sizes[i], rets,
					    UPROBES_HOOK_LINKS - cf->nprobes);

			err = n <= 0 ? (n < 0 ? n : -ENOENT) : 0;
			for (int r = 0; r < n && !err; r++)
				err = probe_add(u, cf, path, fn->ret, off + rets[r], fn->cookie);
		} else if (!err && fn->ret != KERNEL_PROBE_NONE) {
			err = probe_add(u, cf, path, fn->ret, off, fn->cookie);
		}
		if (err) {
			/* A function whose every probe could not be made is left out, as a PMU
			 * probe's failure leaves it out. */
			probes_remove(cf, first);
			if (u->verbose)
				fprintf(stderr, "tokenscope: cannot probe %s: %s\n", fn->name,
					strerror(-err));
			continue;
		}
		cf->shared_fns++;
	}
	if (!cf->nprobes) {
		cf->nprobes = -1;
		return err ? err : -ENOENT;
	}
	return 0;
}

/* h's process's events on the shared probes of cf: inherited by the children it forks from
 * now on. How many functions that hooks, or -errno with none. */
static int hook_shared(struct uprobes_hook *h, const struct uprobes_file *cf)
{
	for (int i = 0; i < cf->nprobes; i++) {
		int fd = tracefs_follow(cf->ids[i], (int)h->pid);

		if (fd < 0) {
			hook_unlink(h);
			return fd;
		}
		h->fds[h->nfds++] = fd;
	}
	return cf->shared_fns;
}

static bool is_denial(int err)
{
	return err == -EACCES || err == -EPERM;
}

/* Keeps the first refusal for want of a permission (uprobes.denied); table NULL for the maps
 * (a device-time library's is said as its vendor's first library's). */
static void deny(struct uprobes *u, enum uprobes_denied what, int err, uint32_t pid,
		 const char *path, const struct libhooks *table)
{
	if (u->denied.what != UPROBES_DENIED_NONE)
		return;
	u->denied.what = what;
	u->denied.kind = table ? table->what : NULL;
	u->denied.traces = table ? table->traces : NULL;
	u->denied.err = -err;
	u->denied.pid = pid;
	snprintf(u->denied.path, sizeof(u->denied.path), "%s", path);
}

/* Hooks the file's functions for h's process; returns how many, and *first_err the first
 * failure other than a function the file lacks. */
static int hook_file(struct uprobes *u, struct uprobes_hook *h, const char *path,
		     struct uprobes_file *cf, int *first_err)
{
	int hooked = 0;

	*first_err = 0;
	if (u->shared && file_probes(u, cf, path) == 0) {
		hooked = hook_shared(h, cf);
		if (hooked < 0) {
			*first_err = hooked;
			return 0;
		}
		return hooked;
	}
	for (size_t i = 0; i < cf->table->n; i++) {
		int err;

		if (!cf->by_name && !cf->offs[i])
			continue;
		err = hook_fn(u, h, path, &cf->table->fns[i], cf->by_name ? 0 : cf->offs[i],
			      cf->sizes[i], cf->skips[i]);
		if (!err) {
			hooked++;
			continue;
		}
		if (err == -ENOENT)
			continue;
		if (!*first_err)
			*first_err = err;
		if (u->verbose) {
			char shown[ESCAPE_COL_BYTES(PROC_MAP_SHOWN_CELLS)];

			fprintf(stderr, "tokenscope: cannot hook %s in %s for pid %u: %s\n",
				cf->table->fns[i].name,
				escape_text_col(shown, sizeof(shown), path, PROC_MAP_SHOWN_CELLS,
						false),
				h->pid, strerror(-err));
		}
	}
	return hooked;
}

/* Attaches the probe of the mode asked for of vendor v's device-time library, for pid (once
 * per process); true if attached. */
static bool hook_devtime(struct uprobes *u, size_t v, uint32_t pid, const char *full,
			 const char *path)
{
	const struct vendor *vr = vendor_row(v);
	const char *probe = u->kernels			      ? TS_DEVTIME_PROBE_KERNELS
			    : u->device == UPROBES_DEVICE_ALL ? TS_DEVTIME_PROBE_ALL
							      : TS_DEVTIME_PROBE;
	struct uprobes_hook *h;
	struct bpf_link *l;
	int err;

	if (u->device == UPROBES_DEVICE_OFF && !u->kernels)
		return false;
	if (hook_find(u, pid, -1 - (int)v) || !(h = hook_new(u, pid, -1 - (int)v)))
		return false;
	err = kernel_attach_cupti(u->k, (int)pid, full, probe, &l);
	/* A library of ABI version 1 has no tokenscope:all, and collects every step through
	 * tokenscope:runs. */
	if (err == -ENOENT && u->device == UPROBES_DEVICE_ALL && !u->kernels) {
		probe = TS_DEVTIME_PROBE;
		err = kernel_attach_cupti(u->k, (int)pid, full, probe, &l);
	}
	if (err)
		fprintf(stderr,
			"tokenscope: cannot attach to the probe %s:%s of pid %u in %s: %s; no "
			"device times\n",
			TS_DEVTIME_PROVIDER, probe, pid, path, strerror(-err));
	else
		h->links[h->nlinks++] = l;
	if (is_denial(err))
		deny(u, UPROBES_DENIED_UPROBE, err, pid, path, &vr->libs[0]);
	if (err) {
		hook_unlink(h);
		return false;
	}
	u->devtime_attached++;
	fprintf(stderr, "tokenscope: device times of pid %u from %s (%s, %s)\n", pid, path,
		vr->devtime.what,
		u->kernels			  ? "every operation"
		: u->device == UPROBES_DEVICE_ALL ? "every step"
						  : "eager kernels sampled; --device-times all for "
						    "every step");
	return true;
}

/*
 * On the development VM a TLS write traced through the exported SSL_write_ex's entry and return
 * cost 23 us more, of which the single-step of its first instruction (`sub $8,%rsp`) was about
 * half: where a _ex function is a thin wrapper (loader/insn.h) around a function that starts
 * with a push, that function is probed in its place. It is the library's internal read or
 * write, which SSL_read and SSL_write call too, with a size_t * of their own for the bytes done:
 * the _ex meaning holds, and the plain functions are left alone.
 */
/* Moves the TLS table's _ex probes to the internal functions they wrap (above), where they are
 * thin wrappers (elf_file_wrapped: on x86-64 alone); returns the change in the number of
 * functions to hook. */
static int tls_unwrap(const struct elf_file *f, struct uprobes_file *cf)
{
	static const uint32_t pairs[][2] = { { TS_TLS_READ_EX, TS_TLS_READ },
					     { TS_TLS_WRITE_EX, TS_TLS_WRITE } };
	int change = 0;

	if (cf->table->fns != tls_fns)
		return 0;
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		size_t ex = cf->table->n, plain = cf->table->n;
		uint64_t inner;

		for (size_t k = 0; k < cf->table->n; k++) {
			if (cf->table->fns[k].cookie == pairs[i][0])
				ex = k;
			if (cf->table->fns[k].cookie == pairs[i][1])
				plain = k;
		}
		if (ex == cf->table->n || !cf->offs[ex] ||
		    !(inner = elf_file_wrapped(f, cf->offs[ex])))
			continue;
		cf->offs[ex] = inner;
		if (plain < cf->table->n && cf->offs[plain]) {
			cf->offs[plain] = 0;
			change--;
		}
	}
	return change;
}

/* Where the entries of the Go functions are probed: where they cost one trap (elf.h), once
 * per file. */
static void go_skips(const struct elf_file *f, struct uprobes_file *cf)
{
	for (size_t k = 0; k < cf->table->n; k++)
		if (cf->offs[k])
			cf->skips[k] = elf_file_cheap_entry(f, cf->offs[k]);
}

/*
 * Where each function of the file's table lies (cf->offs; 0 where it is not defined), read
 * once per file (elf_file_fns), rather than asked of libbpf by name: that parses the file once
 * per name and per process, and for a large executable that links no CUDA (Node's is 100 MB)
 * it stalled the loader, and the draining of the ring buffer, for seconds. A Go executable's
 * functions count only where it passes arguments in registers. Returns how many it found, or
 * -errno when the file cannot be read as ELF.
 */
static int resolve(const char *path, struct uprobes_file *cf)
{
	const char *names[LIBHOOKS_FNS_MAX];
	struct elf_file f;
	int found = elf_file_open(&f, path);

	if (found)
		return found;
	for (size_t k = 0; k < cf->table->n; k++)
		names[k] = cf->table->fns[k].name;
	found = elf_file_fns(&f, names, cf->table->n, cf->offs, cf->sizes);
	found += tls_unwrap(&f, cf);
	if (found > 0 && cf->table->fns == go_tls_fns) {
		if (elf_file_go_regabi(&f))
			go_skips(&f, cf);
		else
			found = 0;
	}
	elf_file_close(&f);
	return found;
}

/* The file as a library of table's kind (seen before, or now: its functions found); NULL when
 * UPROBES_MAX_FILES are known. */
static struct uprobes_file *file_of(struct uprobes *u, const struct stat *st, const char *full,
				    const struct libhooks *table)
{
	struct uprobes_file *cf;
	int found;

	for (int i = 0; i < u->nfiles; i++)
		if (u->files[i].dev == st->st_dev && u->files[i].ino == st->st_ino &&
		    u->files[i].table == table)
			return &u->files[i];
	if (u->nfiles == UPROBES_MAX_FILES) {
		char shown[ESCAPE_COL_BYTES(PROC_MAP_SHOWN_CELLS)];

		if (!u->files_full)
			fprintf(stderr,
				"tokenscope: %d library files looked at, the most kept: %s and "
				"later files are not hooked\n",
				UPROBES_MAX_FILES,
				escape_text_col(shown, sizeof(shown), full, PROC_MAP_SHOWN_CELLS,
						false));
		u->files_full = true;
		return NULL;
	}
	cf = &u->files[u->nfiles++];
	memset(cf, 0, sizeof(*cf));
	cf->dev = st->st_dev;
	cf->ino = st->st_ino;
	cf->table = table;
	found = resolve(full, cf);
	/* Unreadable here: libbpf may still read it (it decides, function by function). */
	cf->by_name = found < 0;
	cf->nfns = found < 0 ? (int)table->n : found;
	return cf;
}

/* Whether pid inherited its parent's probes of file file at its fork. */
static bool inherited(const struct uprobes *u, uint32_t pid, int file)
{
	uint32_t n = u->ninherited < UPROBES_MAX_INHERITED ? u->ninherited : UPROBES_MAX_INHERITED;

	if (file < 0 || file >= 64)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (u->inherited[i].pid == pid)
			return u->inherited[i].files >> file & 1;
	return false;
}

void uprobes_fork(struct uprobes *u, uint32_t parent, uint32_t ptid, uint32_t child)
{
	uint64_t files = 0;

	/* Only the main thread's events are sure to have been copied (tracefs.h). */
	if (!u->shared || ptid != parent) {
		uprobes_scan(u, child, false);
		return;
	}
	for (int i = 0; i < u->nhooks; i++)
		if (u->hooks[i].pid == parent && u->hooks[i].nfds && u->hooks[i].file >= 0 &&
		    u->hooks[i].file < 64)
			files |= 1ull << u->hooks[i].file;
	if (!files)
		return;
	if (!u->inherited && !(u->inherited = calloc(UPROBES_MAX_INHERITED, sizeof(*u->inherited))))
		return;
	u->inherited[u->ninherited++ % UPROBES_MAX_INHERITED] =
	    (struct uprobes_inherited){ child, files };
}

/* A library of table's kind hooked for a traced process: its vendor's bit, if a GPU's. */
static void mark_gpu(struct uprobes *u, const struct libhooks *table)
{
	int v = vendor_of(table);

	if (v >= 0)
		u->gpu_mapped |= 1u << v;
}

/* Hooks the mapped file at path (full: through the process's root) as a library of table's
 * kind for pid, unless done before; guess: an executable that may not link it in. Returns the
 * functions hooked, or -ENOSPC when no more files can be kept. */
static int scan_file(struct uprobes *u, uint32_t pid, const char *full, const char *path,
		     const struct libhooks *table, bool guess, bool late)
{
	struct uprobes_file *cf;
	struct uprobes_hook *h;
	struct stat st;
	int hooked, err = 0;

	if (stat(full, &st)) {
		if (is_denial(-errno))
			deny(u, UPROBES_DENIED_ROOT, -errno, pid, path, table);
		return 0;
	}
	cf = file_of(u, &st, full, table);
	if (!cf)
		return -ENOSPC;
	/* An executable is hooked only where its symbols show the library linked in. */
	if (!cf->nfns || (guess && cf->by_name))
		return 0;
	h = hook_find(u, pid, (int)(cf - u->files));
	if (h && h->mapped)
		return 0;
	if (h && h->nfds) {
		/* Given its events before it mapped the file: the kernel hooked it at the mmap. */
		h->mapped = true;
		cf->hooked = true;
		mark_gpu(u, table);
		fprintf(stderr,
			"tokenscope: tracing %s calls of pid %u in %s (%d functions, hooked when "
			"it mapped the file)\n",
			table->what, pid, path, cf->shared_fns);
		return cf->shared_fns;
	}
	if (!h && !(h = hook_new(u, pid, (int)(cf - u->files))))
		return 0;
	hooked = hook_file(u, h, full, cf, &err);
	if (!hooked && is_denial(err))
		deny(u, UPROBES_DENIED_UPROBE, err, pid, path, table);
	if (!hooked)
		return 0;
	cf->hooked = true;
	h->mapped = true;
	mark_gpu(u, table);
	if (late && inherited(u, pid, (int)(cf - u->files)))
		late = false; /* it carried its parent's probes of the file from its fork */
	if (late)
		u->late_hooks++;
	fprintf(stderr, "tokenscope: tracing %s calls of pid %u in %s (%d functions%s)\n",
		table->what, pid, path, hooked,
		late ? "; hooked late, by the once-a-second scan: its first calls may be missed"
		     : "");
	return hooked;
}

/*
 * Library files a process may load later by name (dlopen("libcudart.so.13")): the entries of
 * its dynamic loader's cache (/etc/ld.so.cache under its root) named as a table's files, made
 * known (their probes made) so that prehook gives them to it before it maps one. Each cache
 * file is read once. The cache's format: "glibc-ld.so.cache1.1", the entry count at byte 20,
 * entries of 24 bytes from byte 48 whose key (name) and value (path) are offsets of strings
 * from the magic.
 */
static void cache_candidates(struct uprobes *u, uint32_t pid)
{
	static const char magic[] = "glibc-ld.so.cache1.1";
	char path[64], full[4200];
	struct stat st;
	size_t len;
	const char *c;
	char *buf;
	uint32_t nlibs;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/root/etc/ld.so.cache", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) || st.st_size < 48 || st.st_size > (16 << 20)) {
		close(fd);
		return;
	}
	for (int i = 0; i < u->ncaches; i++) {
		if (u->caches[i].dev == st.st_dev && u->caches[i].ino == st.st_ino) {
			close(fd);
			return;
		}
	}
	/* Past the caches kept, none is read: each scan would read it again. */
	if (u->ncaches == UPROBES_MAX_CACHES) {
		close(fd);
		return;
	}
	u->caches[u->ncaches++] = (struct uprobes_seen){ st.st_dev, st.st_ino };
	len = (size_t)st.st_size;
	buf = malloc(len + 1);
	if (!buf || pread(fd, buf, len, 0) != (ssize_t)len) {
		free(buf);
		close(fd);
		return;
	}
	close(fd);
	buf[len] = 0;
	/* An old-format part may come first. */
	c = memmem(buf, len, magic, sizeof(magic) - 1);
	if (!c || (size_t)(c - buf) + 48 > len)
		goto out;
	memcpy(&nlibs, c + 20, sizeof(nlibs));
	for (uint32_t i = 0; i < nlibs; i++) {
		size_t e = (size_t)(c - buf) + 48 + (size_t)i * 24, base = (size_t)(c - buf);
		uint32_t key, value;

		if (e + 24 > len)
			break;
		memcpy(&key, buf + e + 4, sizeof(key));
		memcpy(&value, buf + e + 8, sizeof(value));
		if (base + key >= len || base + value >= len || buf[base + value] != '/')
			continue;
		for (size_t t = 0; table_at(t); t++) {
			const char *pre = table_at(t)->file_prefix;
			struct uprobes_file *cf;
			struct stat lst;

			/* Half the files at most: the rest is kept for files processes map. */
			if (!pre || strncmp(buf + base + key, pre, strlen(pre)) ||
			    u->nfiles >= UPROBES_MAX_FILES / 2)
				continue;
			snprintf(full, sizeof(full), "/proc/%u/root%s", pid, buf + base + value);
			if (stat(full, &lst) || !(cf = file_of(u, &lst, full, table_at(t))))
				continue;
			if (cf->nfns && !cf->nprobes && !file_probes(u, cf, full) && u->verbose)
				fprintf(
				    stderr,
				    "tokenscope: %s is ready for a traced process that loads it "
				    "later\n",
				    buf + base + value);
		}
	}
out:
	free(buf);
}

/* Shared probes: pid's events on every file known, so that the kernel hooks one it maps later
 * at its mmap (a dlopen). Not counted as hooked for it until it maps the file. */
static void prehook(struct uprobes *u, uint32_t pid)
{
	struct rlimit nofile;
	rlim_t open_fds = 0;

	/* A perf event per probe per process: at most half the descriptors go to these, so that
	 * sockets and files are never refused for them. */
	if (getrlimit(RLIMIT_NOFILE, &nofile))
		return;
	for (int i = 0; i < u->nhooks; i++)
		open_fds += (rlim_t)u->hooks[i].nfds;
	for (int i = 0; i < u->nfiles; i++) {
		struct uprobes_file *cf = &u->files[i];
		struct uprobes_hook *h;

		/* Half the pairs at most: the rest is kept for files processes do map. */
		if (cf->nprobes <= 0 || hook_find(u, pid, i) ||
		    u->nhooks >= UPROBES_MAX_HOOKS / 2 ||
		    open_fds + (rlim_t)cf->nprobes > nofile.rlim_cur / 2 ||
		    !(h = hook_new(u, pid, i)))
			continue;
		open_fds += (rlim_t)cf->nprobes;
		if (hook_shared(h, cf) < 0)
			/* Kept without events: the process is not tried again for this file. */
			continue;
	}
}

/* The vendor whose device-time library the file named base is (an index in vendor.h's rows),
 * or -1. */
static int devtime_of(const char *base)
{
	for (size_t v = 0; v < vendor_count(); v++) {
		const char *pre = vendor_row(v)->devtime.file_prefix;

		if (pre && !strncmp(base, pre, strlen(pre)))
			return (int)v;
	}
	return -1;
}

int uprobes_scan(struct uprobes *u, uint32_t pid, bool late)
{
	char maps[64], exe[4096], line[4096 + 128];
	struct proc_map *m = malloc(sizeof(*m));
	ssize_t exe_len;
	FILE *f;
	int total = 0;

	snprintf(maps, sizeof(maps), "/proc/%u/exe", pid);
	exe_len = readlink(maps, exe, sizeof(exe) - 1);
	exe[exe_len > 0 ? exe_len : 0] = 0;
	if (!m)
		return -ENOMEM;
	snprintf(maps, sizeof(maps), "/proc/%u/maps", pid);
	f = fopen(maps, "re");
	if (!f) {
		int err = -errno;

		if (is_denial(err))
			deny(u, UPROBES_DENIED_MAPS, err, pid, maps, NULL);
		free(m);
		return err;
	}
	while (fgets(line, sizeof(line), f)) {
		char full[sizeof(m->path) + 32];
		const char *base;
		bool is_exe, full_up = false;
		int dv;

		/* A file deleted since it was mapped (" (deleted)") is not hooked: its path now
		 * names another file, or none. */
		if (proc_maps_parse(line, m) || !m->exec || m->path[0] != '/')
			continue;
		/* Through the process's own root: the path is the one its mount namespace sees. */
		snprintf(full, sizeof(full), "/proc/%u/root%s", pid, m->path);
		base = strrchr(m->path, '/') + 1;
		if ((dv = devtime_of(base)) >= 0) {
			total += hook_devtime(u, (size_t)dv, pid, full, m->shown);
			continue;
		}
		is_exe = !strcmp(m->path, exe);
		for (size_t t = 0; table_at(t); t++) {
			const struct libhooks *table = table_at(t);
			bool named = table->file_prefix &&
				     !strncmp(base, table->file_prefix, strlen(table->file_prefix));
			int n;

			if (!named && !(is_exe && table->exe_too))
				continue;
			n = scan_file(u, pid, full, m->shown, table, !named, late);
			if (n == -ENOSPC) {
				full_up = true;
				break;
			}
			total += n;
		}
		if (full_up)
			break;
	}
	fclose(f);
	free(m);
	if (u->shared) {
		if (!u->held_mappings)
			cache_candidates(u, pid);
		prehook(u, pid);
	}
	return total;
}

int uprobes_mapped(struct uprobes *u, uint32_t pid, uint64_t mapped_ns,
		   bool (*held)(void *ctx, uint32_t pid), void *ctx)
{
	int before = u->nhooks, n = uprobes_scan(u, pid, false);
	struct timespec now;
	uint64_t window;
	bool counted = false;

	if (n <= 0 || !held || held(ctx, pid))
		return n;
	clock_gettime(CLOCK_MONOTONIC, &now);
	window = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec - mapped_ns;
	for (int i = before; i < u->nhooks; i++) {
		if (!u->hooks[i].mapped)
			continue;
		u->map_hooks++;
		counted = true;
		if (window > u->map_window_max_ns)
			u->map_window_max_ns = window;
	}
	if (counted && u->verbose)
		fprintf(stderr, "tokenscope: pid %u hooked %.3f ms after it mapped the library\n",
			pid, (double)window / 1e6);
	return n;
}

int uprobes_hooked_files(const struct uprobes *u, const char *what)
{
	int n = 0;

	for (int i = 0; i < u->nfiles; i++)
		n += u->files[i].hooked && !strcmp(u->files[i].table->what, what);
	return n;
}

void uprobes_forget(struct uprobes *u, uint32_t pid)
{
	for (uint32_t i = 0; u->inherited && i < UPROBES_MAX_INHERITED; i++)
		if (u->inherited[i].pid == pid)
			u->inherited[i] = (struct uprobes_inherited){ 0, 0 };
	for (int i = 0; i < u->nhooks; i++) {
		if (u->hooks[i].pid != pid)
			continue;
		hook_unlink(&u->hooks[i]);
		u->hooks[i--] = u->hooks[--u->nhooks];
	}
}

int uprobes_count(const struct uprobes *u)
{
	int n = 0;

	for (int i = 0; i < u->nhooks; i++)
		n += u->hooks[i].nlinks + u->hooks[i].nfds;
	for (int i = 0; i < u->nfiles; i++)
		n += u->files[i].nprobes > 0 ? u->files[i].nprobes : 0;
	return n;
}

bool uprobes_detach(struct uprobes *u, bool (*stop)(void *ctx), void *ctx)
{
	for (int i = 0; i < u->nhooks; i++) {
		if (stop && stop(ctx))
			return false;
		hook_unlink(&u->hooks[i]);
	}
	for (int i = 0; i < u->nfiles; i++) {
		if (stop && stop(ctx))
			return false;
		probes_remove(&u->files[i], 0);
	}
	free(u->hooks);
	u->hooks = NULL;
	u->nhooks = 0;
	free(u->inherited);
	u->inherited = NULL;
	u->ninherited = 0;
	return true;
}
