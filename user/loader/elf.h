/* SPDX-License-Identifier: MIT */
/*
 * What the loader reads in the ELF files it hooks (libelf, and the code's bytes by hand): where
 * functions lie, as file offsets, from one pass over the symbol tables; their code, decoded
 * (insn.h) to find where a uprobe costs least; and whether a Go executable passes arguments in
 * registers. Nothing here decides what to hook nor attaches anything: uprobes.c does.
 *
 * The instructions decoded are the loader's own architecture's (x86-64 or arm64), the one whose
 * processes it traces.
 */
#ifndef TS_LOADER_ELF_H
#define TS_LOADER_ELF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct Elf;

/* An ELF file open for reading: its descriptor, libelf's handle on it, and how many program
 * headers it has. */
struct elf_file {
	int fd;
	struct Elf *e;
	size_t phnum;
};

/* Opens the file at path as ELF: 0, -errno when it cannot be opened, or -EINVAL when it is not
 * ELF (or libelf cannot read it). */
int elf_file_open(struct elf_file *f, const char *path);
void elf_file_close(struct elf_file *f);
/*
 * Where each of the n functions named lies, in one pass over the file's symbol tables, as
 * libbpf would find it by name: the first defined function of that name in an executable
 * segment. offs[k] is its file offset (0 where none is found) and sizes[k] its symbol's size.
 * Returns how many were found. Names that all begin with the same two characters (each of
 * uprobes.c's tables') let most symbols be passed over on their first two.
 */
int elf_file_fns(const struct elf_file *f, const char *const *names, size_t n, uint64_t *offs,
		 uint64_t *sizes);
/*
 * Whether the file is a Go executable that passes arguments in registers: the loader's own
 * architecture (x86-64 or arm64), built by Go 1.17 or later (1.18 on arm64). The version is
 * the "go1.N" string of its build information (section .go.buildinfo, which every Go
 * executable since 1.13 has: the string itself from 1.18, a pointer to it before, when the
 * string sits in the data instead). Without it, or older, or another architecture, false: the
 * registers would not hold the arguments, and what they hold must not be read as a buffer.
 */
bool elf_file_go_regabi(const struct elf_file *f);
/* The file offset of the function that a thin wrapper (insn.h) at off calls, when that function
 * starts with a push of a register (which a uprobe emulates); 0 when the code at off is not
 * such a wrapper, and on arm64, where none is looked for. */
uint64_t elf_file_wrapped(const struct elf_file *f, uint64_t off);
/* Where the entry of the Go function at off is probed, from its start: where it costs one trap
 * (insn_x86_cheap_entry). On arm64 0, its start: the first instruction is single-stepped (no
 * decoder of arm64 prologues here yet). */
uint32_t elf_file_cheap_entry(const struct elf_file *f, uint64_t off);
/* The RET instructions of the function at off (size bytes) in the file at path: their offsets
 * from off in rets (at most max); how many, or -errno. */
int elf_fn_rets(const char *path, uint64_t off, uint64_t size, uint32_t *rets, int max);

#endif
