// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader/elf.h"
#include "loader/insn.h"

/* The first Go release whose functions take their arguments in registers: 1.17 on x86-64,
 * 1.18 on arm64. */
#if defined(__aarch64__)
#define GO_REGABI_MINOR 18
#define GO_MACHINE EM_AARCH64
#define INSN_RETS insn_arm64_rets
#else
#define GO_REGABI_MINOR 17
#define GO_MACHINE EM_X86_64
#define INSN_RETS insn_x86_rets
#endif

int elf_file_open(struct elf_file *f, const char *path)
{
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return -errno;
	if (elf_version(EV_CURRENT) == EV_NONE ||
	    !(f->e = elf_begin(f->fd, ELF_C_READ_MMAP, NULL))) {
		close(f->fd);
		return -EINVAL;
	}
	if (elf_kind(f->e) != ELF_K_ELF || elf_getphdrnum(f->e, &f->phnum)) {
		elf_end(f->e);
		close(f->fd);
		return -EINVAL;
	}
	return 0;
}

void elf_file_close(struct elf_file *f)
{
	elf_end(f->e);
	close(f->fd);
}

/* The file offset of a function at vaddr: in the executable segment that holds it. */
static uint64_t vaddr_off(const struct elf_file *f, uint64_t vaddr)
{
	for (size_t i = 0; i < f->phnum; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(f->e, (int)i, &ph) && ph.p_type == PT_LOAD &&
		    (ph.p_flags & PF_X) && vaddr >= ph.p_vaddr && vaddr - ph.p_vaddr < ph.p_memsz)
			return vaddr - ph.p_vaddr + ph.p_offset;
	}
	return 0;
}

/* Whether every name begins with the same two characters as the first. */
static bool same_start(const char *const *names, size_t n)
{
	for (size_t k = 1; k < n; k++)
		if (strncmp(names[k], names[0], 2))
			return false;
	return true;
}

/* The functions named among the n symbols of a symbol table (d, its strings in section
 * strings): elf_file_fns's pass over one table. */
static int table_fns(const struct elf_file *f, Elf_Data *d, size_t nsyms, size_t strings,
		     const char *const *names, size_t n, uint64_t *offs, uint64_t *sizes)
{
	const char *first = names[0];
	bool quick = same_start(names, n);
	int found = 0;

	for (size_t i = 0; i < nsyms; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
		    sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		name = elf_strptr(f->e, strings, sym.st_name);
		if (!name || (quick && (name[0] != first[0] || name[1] != first[1])))
			continue;
		for (size_t k = 0; k < n; k++) {
			if (offs[k] || strcmp(name, names[k]))
				continue;
			offs[k] = vaddr_off(f, sym.st_value);
			sizes[k] = sym.st_size;
			found += offs[k] != 0;
			break;
		}
	}
	return found;
}

int elf_file_fns(const struct elf_file *f, const char *const *names, size_t n, uint64_t *offs,
		 uint64_t *sizes)
{
	Elf_Scn *scn = NULL;
	int found = 0;

	memset(offs, 0, n * sizeof(*offs));
	memset(sizes, 0, n * sizeof(*sizes));
	if (!n)
		return 0;
	while ((scn = elf_nextscn(f->e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || !sh.sh_entsize ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		found +=
		    table_fns(f, d, sh.sh_size / sh.sh_entsize, sh.sh_link, names, n, offs, sizes);
	}
	return found;
}

bool elf_file_go_regabi(const struct elf_file *f)
{
	GElf_Ehdr eh;
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (!gelf_getehdr(f->e, &eh) || eh.e_machine != GO_MACHINE ||
	    elf_getshdrstrndx(f->e, &shstrndx))
		return false;
	while ((scn = elf_nextscn(f->e, scn))) {
		GElf_Shdr sh;
		const char *name;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(f->e, shstrndx, sh.sh_name)) ||
		    strcmp(name, ".go.buildinfo") || !(d = elf_getdata(scn, NULL)) || !d->d_buf)
			continue;
		for (size_t i = 0; i + 6 <= d->d_size; i++) {
			const char *p = (const char *)d->d_buf + i;
			int minor = 0;

			if (memcmp(p, "go1.", 4))
				continue;
			for (size_t k = i + 4; k < d->d_size && p[k - i] >= '0' && p[k - i] <= '9';
			     k++)
				minor = minor * 10 + (p[k - i] - '0');
			return minor >= GO_REGABI_MINOR;
		}
	}
	return false;
}

uint64_t elf_file_wrapped(const struct elf_file *f, uint64_t off)
{
#if defined(__x86_64__)
	uint8_t b[INSN_X86_WRAPPER_BYTES], t[2];
	uint64_t target;

	if (pread(f->fd, b, sizeof(b), (off_t)off) != (ssize_t)sizeof(b) ||
	    !insn_x86_thin_wrapper(b, sizeof(b), off, &target) ||
	    pread(f->fd, t, sizeof(t), (off_t)target) != (ssize_t)sizeof(t) ||
	    !insn_x86_push(t, sizeof(t)))
		return 0;
	return target;
#else
	(void)f;
	(void)off;
	return 0;
#endif
}

uint32_t elf_file_cheap_entry(const struct elf_file *f, uint64_t off)
{
#if defined(__aarch64__)
	(void)f;
	(void)off;
	return 0;
#else
	uint8_t b[64];
	ssize_t n = pread(f->fd, b, sizeof(b), (off_t)off);

	return n > 0 ? insn_x86_cheap_entry(b, (size_t)n) : 0;
#endif
}

int elf_fn_rets(const char *path, uint64_t off, uint64_t size, uint32_t *rets, int max)
{
	uint8_t *b;
	int fd, n;

	if (!size || size > (1u << 20) || !(b = malloc(size)))
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 && pread(fd, b, size, (off_t)off) == (ssize_t)size
		? INSN_RETS(b, size, rets, (size_t)max)
		: -EIO;
	if (fd >= 0)
		close(fd);
	free(b);
	return n;
}
