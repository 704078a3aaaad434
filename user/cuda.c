// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/types.h>
#include <bpf/libbpf.h>

#include "cuda.h"
#include "grow.h"
#include "events.h"
#include "tokenscope.skel.h"

struct cuda_fn {
	const char *name;
	enum ts_cuda_fn kind;
};

/* Runtime API (libcudart, or an executable that links it statically). */
static const struct cuda_fn runtime_fns[] = {
	{ "cudaLaunchKernel", TS_CUDA_LAUNCH },
	{ "cudaLaunchKernel_ptsz", TS_CUDA_LAUNCH },
	{ "cudaLaunchKernelExC", TS_CUDA_LAUNCH },
	{ "cudaLaunchKernelExC_ptsz", TS_CUDA_LAUNCH },
	{ "cudaGraphLaunch", TS_CUDA_GRAPH_LAUNCH },
	{ "cudaGraphLaunch_ptsz", TS_CUDA_GRAPH_LAUNCH },
	{ "cudaMemcpy", TS_CUDA_MEMCPY },
	{ "cudaMemcpy_ptds", TS_CUDA_MEMCPY },
	{ "cudaMemcpyAsync", TS_CUDA_MEMCPY },
	{ "cudaMemcpyAsync_ptsz", TS_CUDA_MEMCPY },
	{ "cudaStreamSynchronize", TS_CUDA_SYNC },
	{ "cudaStreamSynchronize_ptsz", TS_CUDA_SYNC },
	{ "cudaDeviceSynchronize", TS_CUDA_SYNC },
	{ "cudaEventSynchronize", TS_CUDA_SYNC },
};

/* Driver API (libcuda): Triton and other JITs launch through it directly. */
static const struct cuda_fn driver_fns[] = {
	{ "cuLaunchKernel", TS_CUDA_LAUNCH },
	{ "cuLaunchKernel_ptsz", TS_CUDA_LAUNCH },
	{ "cuLaunchKernelEx", TS_CUDA_LAUNCH },
	{ "cuLaunchKernelEx_ptsz", TS_CUDA_LAUNCH },
	{ "cuGraphLaunch", TS_CUDA_GRAPH_LAUNCH },
	{ "cuGraphLaunch_ptsz", TS_CUDA_GRAPH_LAUNCH },
	{ "cuMemcpyDtoH_v2", TS_CUDA_MEMCPY_DTOH },
	{ "cuMemcpyDtoH_v2_ptds", TS_CUDA_MEMCPY_DTOH },
	{ "cuMemcpyDtoHAsync_v2", TS_CUDA_MEMCPY_DTOH },
	{ "cuMemcpyDtoHAsync_v2_ptsz", TS_CUDA_MEMCPY_DTOH },
	{ "cuStreamSynchronize", TS_CUDA_SYNC },
	{ "cuStreamSynchronize_ptsz", TS_CUDA_SYNC },
	{ "cuCtxSynchronize", TS_CUDA_SYNC },
	{ "cuEventSynchronize", TS_CUDA_SYNC },
};

void cuda_init(struct cuda_attach *ca, struct tokenscope_bpf *skel, bool verbose)
{
	memset(ca, 0, sizeof(*ca));
	ca->skel = skel;
	ca->verbose = verbose;
}

static int cuda_keep_link(struct cuda_attach *ca, struct bpf_link *l)
{
	struct bpf_link **n = grow(ca->links, &ca->cap, ca->nlinks + 1, sizeof(*n), 64);

	if (!n)
		return -ENOMEM;
	ca->links = n;
	ca->links[ca->nlinks++] = l;
	return 0;
}

static int cuda_hook_one(struct cuda_attach *ca, const char *path, const struct cuda_fn *fn)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = fn->name, .bpf_cookie = fn->kind);
	struct bpf_link *l, *r = NULL;

	if (fn->kind == TS_CUDA_SYNC) {
		l = bpf_program__attach_uprobe_opts(ca->skel->progs.ts_cuda_sync, -1, path, 0,
						    &opts);
		if (!l)
			return -errno;
		opts.retprobe = true;
		r = bpf_program__attach_uprobe_opts(ca->skel->progs.ts_cuda_sync_ret, -1, path, 0,
						    &opts);
		if (!r) {
			int err = -errno;

			bpf_link__destroy(l);
			return err;
		}
	} else {
		l = bpf_program__attach_uprobe_opts(ca->skel->progs.ts_cuda_call, -1, path, 0,
						    &opts);
		if (!l)
			return -errno;
	}
	if (cuda_keep_link(ca, l) || (r && cuda_keep_link(ca, r))) {
		bpf_link__destroy(l);
		bpf_link__destroy(r);
		return -ENOMEM;
	}
	return 0;
}

static bool cuda_is_denial(int err)
{
	return err == -EACCES || err == -EPERM;
}

/* Keeps the first refusal for want of a permission (cuda_attach.denied). */
static void cuda_deny(struct cuda_attach *ca, enum cuda_denied what, int err, uint32_t pid,
		      const char *path)
{
	if (ca->denied.what != CUDA_DENIED_NONE)
		return;
	ca->denied.what = what;
	ca->denied.err = -err;
	ca->denied.pid = pid;
	snprintf(ca->denied.path, sizeof(ca->denied.path), "%s", path);
}

/* Hooks what of table exists in the file; returns the number of functions hooked, and *err the
 * first failure other than a function the file lacks. */
static int cuda_hook_file(struct cuda_attach *ca, const char *path, const struct cuda_fn *table,
			  size_t n, int *first_err)
{
	int hooked = 0;

	*first_err = 0;
	for (size_t i = 0; i < n; i++) {
		int err = cuda_hook_one(ca, path, &table[i]);

		if (!err) {
			hooked++;
			continue;
		}
		if (err == -ENOENT)
			continue;
		if (!*first_err)
			*first_err = err;
		if (ca->verbose)
			fprintf(stderr, "tokenscope: cannot hook %s in %s: %s\n", table[i].name,
				path, strerror(-err));
	}
	return hooked;
}

/* Attaches the injection library's probes for pid (once per process); true if attached. */
static bool cuda_hook_cupti(struct cuda_attach *ca, uint32_t pid, const char *full,
			    const char *path)
{
	static const char *const probes[] = { "runs", "kernels" };
	int attached = 0, err = 0;

	for (int i = 0; i < ca->ncupti; i++)
		if (ca->cupti_pids[i] == pid)
			return false;
	if (ca->ncupti == CUDA_MAX_CUPTI)
		return false;
	ca->cupti_pids[ca->ncupti++] = pid;
	for (int i = 0; i < (ca->kernels ? 2 : 1); i++) {
		struct bpf_link *l =
		    bpf_program__attach_usdt(ca->skel->progs.ts_cupti_runs, (int)pid, full,
					     TS_CUPTI_PROVIDER, probes[i], NULL);

		if (!l) {
			err = -errno;
			fprintf(stderr,
				"tokenscope: cannot attach to the probe %s:%s of pid %u in %s: "
				"%s; no device times\n",
				TS_CUPTI_PROVIDER, probes[i], pid, path, strerror(-err));
			break;
		}
		if (cuda_keep_link(ca, l)) {
			bpf_link__destroy(l);
			break;
		}
		attached++;
	}
	if (cuda_is_denial(err))
		cuda_deny(ca, CUDA_DENIED_UPROBE, err, pid, path);
	if (attached && !err) {
		ca->cupti_attached++;
		fprintf(stderr, "tokenscope: device times of pid %u from %s (CUPTI)\n", pid, path);
	}
	return attached && !err;
}

static struct cuda_file *cuda_file_seen(struct cuda_attach *ca, dev_t dev, ino_t ino)
{
	for (int i = 0; i < ca->nfiles; i++)
		if (ca->files[i].dev == dev && ca->files[i].ino == ino)
			return &ca->files[i];
	return NULL;
}

/*
 * Whether the ELF file defines a function of table, in one pass over its symbol tables. An
 * executable is looked at for a statically linked runtime, and asking libbpf to attach each
 * function parses the file once per name: for a large executable that links no CUDA (Node's is
 * 100 MB) that stalled the loader, and the draining of the ring buffer, for seconds. True when
 * the file cannot be read: libbpf then decides.
 */
static bool cuda_file_defines_any(const char *path, const struct cuda_fn *table, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf_Scn *scn = NULL;
	bool found = false;
	Elf *e;

	if (fd < 0)
		return true;
	if (elf_version(EV_CURRENT) == EV_NONE || !(e = elf_begin(fd, ELF_C_READ_MMAP, NULL))) {
		close(fd);
		return true;
	}
	while (!found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; !found && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(d, i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    sym.st_shndx == SHN_UNDEF)
				continue;
			name = elf_strptr(e, sh.sh_link, sym.st_name);
			/* Every name in the tables starts with "cu". */
			if (!name || name[0] != 'c' || name[1] != 'u')
				continue;
			for (size_t k = 0; k < n && !found; k++)
				found = !strcmp(name, table[k].name);
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

/* Which table a mapped file calls for: the runtime, the driver, or (for the executable) maybe
 * a statically linked runtime, which *guess says. */
static const struct cuda_fn *cuda_table_for(const char *path, bool is_exe, size_t *n, bool *guess)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	*guess = false;
	if (!strncmp(base, "libcudart.so", 12)) {
		*n = sizeof(runtime_fns) / sizeof(runtime_fns[0]);
		return runtime_fns;
	}
	if (!strncmp(base, "libcuda.so", 10)) {
		*n = sizeof(driver_fns) / sizeof(driver_fns[0]);
		return driver_fns;
	}
	if (is_exe) {
		*n = sizeof(runtime_fns) / sizeof(runtime_fns[0]);
		*guess = true;
		return runtime_fns;
	}
	return NULL;
}

int cuda_scan(struct cuda_attach *ca, uint32_t pid)
{
	char maps[64], exe[4096], line[4096 + 128];
	ssize_t exe_len;
	FILE *f;
	int total = 0;

	snprintf(maps, sizeof(maps), "/proc/%u/exe", pid);
	exe_len = readlink(maps, exe, sizeof(exe) - 1);
	exe[exe_len > 0 ? exe_len : 0] = 0;
	snprintf(maps, sizeof(maps), "/proc/%u/maps", pid);
	f = fopen(maps, "re");
	if (!f) {
		int err = -errno;

		if (cuda_is_denial(err))
			cuda_deny(ca, CUDA_DENIED_MAPS, err, pid, maps);
		return err;
	}
	while (fgets(line, sizeof(line), f)) {
		char perms[8], path[4096 + 64], full[4096 + 96];
		const struct cuda_fn *table;
		const char *base;
		unsigned long long start, end, off, ino;
		unsigned int major, minor;
		struct cuda_file *cf;
		struct stat st;
		size_t n;
		int hooked, err = 0;
		bool guess;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %4095s", &start, &end, perms, &off,
			   &major, &minor, &ino, path) != 8 ||
		    perms[2] != 'x' || path[0] != '/')
			continue;
		/* Through the process's own root: the path is the one its mount namespace sees. */
		snprintf(full, sizeof(full), "/proc/%u/root%s", pid, path);
		base = strrchr(path, '/') + 1;
		if (!strncmp(base, CUDA_CUPTI_LIB, strlen(CUDA_CUPTI_LIB))) {
			total += cuda_hook_cupti(ca, pid, full, path);
			continue;
		}
		table = cuda_table_for(path, !strcmp(path, exe), &n, &guess);
		if (!table)
			continue;
		if (stat(full, &st)) {
			if (cuda_is_denial(-errno))
				cuda_deny(ca, CUDA_DENIED_ROOT, -errno, pid, path);
			continue;
		}
		if (cuda_file_seen(ca, st.st_dev, st.st_ino))
			continue;
		if (ca->nfiles == CUDA_MAX_FILES)
			break;
		hooked = !guess || cuda_file_defines_any(full, table, n)
			     ? cuda_hook_file(ca, full, table, n, &err)
			     : 0;
		if (!hooked && cuda_is_denial(err))
			cuda_deny(ca, CUDA_DENIED_UPROBE, err, pid, path);
		cf = &ca->files[ca->nfiles++];
		cf->dev = st.st_dev;
		cf->ino = st.st_ino;
		cf->hooked = hooked;
		if (hooked)
			fprintf(stderr,
				"tokenscope: tracing CUDA calls of pid %u in %s (%d functions)\n",
				pid, path, hooked);
		total += hooked;
	}
	fclose(f);
	return total;
}

int cuda_hooked_files(const struct cuda_attach *ca)
{
	int n = 0;

	for (int i = 0; i < ca->nfiles; i++)
		n += ca->files[i].hooked > 0;
	return n;
}

void cuda_detach(struct cuda_attach *ca)
{
	for (int i = 0; i < ca->nlinks; i++)
		bpf_link__destroy(ca->links[i]);
	free(ca->links);
	ca->links = NULL;
	ca->nlinks = ca->cap = 0;
}
