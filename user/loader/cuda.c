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

#include "loader/cuda.h"
#include "events.h"
#include "loader/kernel.h"

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

void cuda_init(struct cuda_attach *ca, struct kernel *k, bool verbose)
{
	memset(ca, 0, sizeof(*ca));
	ca->k = k;
	ca->verbose = verbose;
}

/* The hook of pid in file (-1: the CUPTI library's probes), or NULL. */
static struct cuda_hook *cuda_hook_find(struct cuda_attach *ca, uint32_t pid, int file)
{
	for (int i = 0; i < ca->nhooks; i++)
		if (ca->hooks[i].pid == pid && ca->hooks[i].file == file)
			return &ca->hooks[i];
	return NULL;
}

/* A new hook without links; NULL when CUDA_MAX_HOOKS are in use (said once) or there is no
 * memory. Kept even if nothing attaches: a process is tried once per file. */
static struct cuda_hook *cuda_hook_new(struct cuda_attach *ca, uint32_t pid, int file)
{
	struct cuda_hook *h;

	if (!ca->hooks && !(ca->hooks = calloc(CUDA_MAX_HOOKS, sizeof(*ca->hooks))))
		return NULL;
	if (ca->nhooks == CUDA_MAX_HOOKS) {
		if (!ca->hooks_full)
			fprintf(
			    stderr,
			    "tokenscope: %d (process, CUDA library) pairs hooked, the most kept: "
			    "GPU steps of pid %u and of later processes are not traced\n",
			    CUDA_MAX_HOOKS, pid);
		ca->hooks_full = true;
		return NULL;
	}
	h = &ca->hooks[ca->nhooks++];
	memset(h, 0, sizeof(*h));
	h->pid = pid;
	h->file = file;
	return h;
}

static void cuda_hook_unlink(struct cuda_hook *h)
{
	for (int i = 0; i < h->nlinks; i++)
		kernel_link_destroy(h->links[i]);
	h->nlinks = 0;
}

/*
 * Attaches fn for h's process alone: at off in the file, or (off 0: the file's symbols could
 * not be read here) wherever libbpf finds it by name. A host wait gets a return probe too.
 */
static int cuda_hook_fn(struct cuda_attach *ca, struct cuda_hook *h, const char *path,
			const struct cuda_fn *fn, uint64_t off)
{
	const char *name = off ? NULL : fn->name;
	struct bpf_link *l, *r = NULL;
	int pid = (int)h->pid, err;

	if (h->nlinks + 2 > CUDA_HOOK_LINKS)
		return -E2BIG;
	if (fn->kind == TS_CUDA_SYNC) {
		err =
		    kernel_attach_cuda(ca->k, KERNEL_CUDA_SYNC, pid, path, off, name, fn->kind, &l);
		if (err)
			return err;
		err = kernel_attach_cuda(ca->k, KERNEL_CUDA_SYNC_RET, pid, path, off, name,
					 fn->kind, &r);
		if (err) {
			kernel_link_destroy(l);
			return err;
		}
	} else {
		err =
		    kernel_attach_cuda(ca->k, KERNEL_CUDA_CALL, pid, path, off, name, fn->kind, &l);
		if (err)
			return err;
	}
	h->links[h->nlinks++] = l;
	if (r)
		h->links[h->nlinks++] = r;
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

/* Hooks the file's functions for h's process; returns how many, and *first_err the first
 * failure other than a function the file lacks. */
static int cuda_hook_file(struct cuda_attach *ca, struct cuda_hook *h, const char *path,
			  const struct cuda_file *cf, int *first_err)
{
	int hooked = 0;

	*first_err = 0;
	for (size_t i = 0; i < cf->n; i++) {
		int err;

		if (!cf->by_name && !cf->offs[i])
			continue;
		err = cuda_hook_fn(ca, h, path, &cf->table[i], cf->by_name ? 0 : cf->offs[i]);
		if (!err) {
			hooked++;
			continue;
		}
		if (err == -ENOENT)
			continue;
		if (!*first_err)
			*first_err = err;
		if (ca->verbose)
			fprintf(stderr, "tokenscope: cannot hook %s in %s for pid %u: %s\n",
				cf->table[i].name, path, h->pid, strerror(-err));
	}
	return hooked;
}

/* Attaches the injection library's probes for pid (once per process); true if attached. */
static bool cuda_hook_cupti(struct cuda_attach *ca, uint32_t pid, const char *full,
			    const char *path)
{
	static const char *const probes[] = { "runs", "kernels" };
	struct cuda_hook *h;
	int err = 0;

	if (cuda_hook_find(ca, pid, -1) || !(h = cuda_hook_new(ca, pid, -1)))
		return false;
	for (int i = 0; i < (ca->kernels ? 2 : 1); i++) {
		struct bpf_link *l;

		err = kernel_attach_cupti(ca->k, (int)pid, full, probes[i], &l);
		if (err) {
			fprintf(stderr,
				"tokenscope: cannot attach to the probe %s:%s of pid %u in %s: "
				"%s; no device times\n",
				TS_CUPTI_PROVIDER, probes[i], pid, path, strerror(-err));
			break;
		}
		h->links[h->nlinks++] = l;
	}
	if (cuda_is_denial(err))
		cuda_deny(ca, CUDA_DENIED_UPROBE, err, pid, path);
	if (err) {
		cuda_hook_unlink(h);
		return false;
	}
	ca->cupti_attached++;
	fprintf(stderr, "tokenscope: device times of pid %u from %s (CUPTI)\n", pid, path);
	return true;
}

/* The file offset of a function at vaddr: in the executable segment that holds it. */
static uint64_t cuda_vaddr_off(Elf *e, size_t phnum, uint64_t vaddr)
{
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
		    vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_memsz)
			return vaddr - ph.p_vaddr + ph.p_offset;
	}
	return 0;
}

/*
 * Where each function of the file's table lies (cf->offs; 0 where it is not defined), in one
 * pass over its symbol tables, as libbpf would find it by name (the first defined function of
 * that name). Asking libbpf to attach each function by name parses the file once per name and
 * per process: for a large executable that links no CUDA (Node's is 100 MB) that stalled the
 * loader, and the draining of the ring buffer, for seconds. Returns how many it found, or
 * -errno when the file cannot be read as ELF.
 */
static int cuda_resolve(const char *path, struct cuda_file *cf)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
	Elf_Scn *scn = NULL;
	size_t phnum;
	Elf *e;

	if (fd < 0)
		return -errno;
	if (elf_version(EV_CURRENT) == EV_NONE || !(e = elf_begin(fd, ELF_C_READ_MMAP, NULL))) {
		close(fd);
		return -EINVAL;
	}
	if (elf_kind(e) != ELF_K_ELF || elf_getphdrnum(e, &phnum)) {
		elf_end(e);
		close(fd);
		return -EINVAL;
	}
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(d, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
			    !sym.st_value)
				continue;
			name = elf_strptr(e, sh.sh_link, sym.st_name);
			/* Every name in the tables starts with "cu". */
			if (!name || name[0] != 'c' || name[1] != 'u')
				continue;
			for (size_t k = 0; k < cf->n; k++) {
				if (cf->offs[k] || strcmp(name, cf->table[k].name))
					continue;
				cf->offs[k] = cuda_vaddr_off(e, phnum, sym.st_value);
				found += cf->offs[k] != 0;
				break;
			}
		}
	}
	elf_end(e);
	close(fd);
	return found;
}

/* The file (seen before, or now: its functions found); NULL when CUDA_MAX_FILES are known. */
static struct cuda_file *cuda_file_of(struct cuda_attach *ca, const struct stat *st,
				      const char *full, const struct cuda_fn *table, size_t n)
{
	struct cuda_file *cf;
	int found;

	for (int i = 0; i < ca->nfiles; i++)
		if (ca->files[i].dev == st->st_dev && ca->files[i].ino == st->st_ino)
			return &ca->files[i];
	if (ca->nfiles == CUDA_MAX_FILES) {
		if (!ca->files_full)
			fprintf(
			    stderr,
			    "tokenscope: %d CUDA library files looked at, the most kept: %s and "
			    "later files are not hooked\n",
			    CUDA_MAX_FILES, full);
		ca->files_full = true;
		return NULL;
	}
	cf = &ca->files[ca->nfiles++];
	memset(cf, 0, sizeof(*cf));
	cf->dev = st->st_dev;
	cf->ino = st->st_ino;
	cf->table = table;
	cf->n = n;
	found = cuda_resolve(full, cf);
	/* Unreadable here: libbpf may still read it (it decides, function by function). */
	cf->by_name = found < 0;
	cf->nfns = found < 0 ? (int)n : found;
	return cf;
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
		struct cuda_hook *h;
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
		cf = cuda_file_of(ca, &st, full, table, n);
		if (!cf)
			break;
		/* An executable is hooked only where its symbols show a runtime linked in. */
		if (!cf->nfns || (guess && cf->by_name))
			continue;
		if (cuda_hook_find(ca, pid, (int)(cf - ca->files)) ||
		    !(h = cuda_hook_new(ca, pid, (int)(cf - ca->files))))
			continue;
		hooked = cuda_hook_file(ca, h, full, cf, &err);
		if (!hooked && cuda_is_denial(err))
			cuda_deny(ca, CUDA_DENIED_UPROBE, err, pid, path);
		if (!hooked)
			continue;
		cf->hooked = true;
		fprintf(stderr, "tokenscope: tracing CUDA calls of pid %u in %s (%d functions)\n",
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
		n += ca->files[i].hooked;
	return n;
}

void cuda_forget(struct cuda_attach *ca, uint32_t pid)
{
	for (int i = 0; i < ca->nhooks; i++) {
		if (ca->hooks[i].pid != pid)
			continue;
		cuda_hook_unlink(&ca->hooks[i]);
		ca->hooks[i--] = ca->hooks[--ca->nhooks];
	}
}

void cuda_detach(struct cuda_attach *ca)
{
	for (int i = 0; i < ca->nhooks; i++)
		cuda_hook_unlink(&ca->hooks[i]);
	free(ca->hooks);
	ca->hooks = NULL;
	ca->nhooks = 0;
}
