// SPDX-License-Identifier: MIT
#include <capstone/capstone.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lib/dl.h"
#include "loader/insn.h"

/*
 * libcapstone, for Go's crypto/tls alone, is opened on first use: its 77,000 relocations make
 * the loader touch about 3 MiB of it at start, RSS that a tracer of anything but a Go TLS
 * server would carry for nothing. Only the major version of the headers compiled against is
 * taken, since its structs (cs_insn, cs_detail) change between majors. The static build links
 * it in (the Makefile names cs_open, so that the archive's functions come in): the references
 * below are weak, null in the dynamic build, and a static executable has no relocations to
 * apply, so there it costs nothing until used.
 */
struct cs_api {
	cs_err (*open)(cs_arch, cs_mode, csh *);
	cs_err (*option)(csh, cs_opt_type, size_t);
	cs_insn *(*malloc)(csh);
	bool (*disasm_iter)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);
	cs_err (*regs_access)(csh, const cs_insn *, cs_regs, uint8_t *, cs_regs, uint8_t *);
	void (*free)(cs_insn *, size_t);
	cs_err (*close)(csh *);
};

#pragma weak cs_open
#pragma weak cs_option
#pragma weak cs_malloc
#pragma weak cs_disasm_iter
#pragma weak cs_regs_access
#pragma weak cs_free
#pragma weak cs_close

#define CS_STR2(x) #x
#define CS_STR(x) CS_STR2(x)
#define CS_SONAME "libcapstone.so." CS_STR(CS_API_MAJOR)

static const struct cs_api *cs(void)
{
	static struct cs_api api;
	static int state; /* 0: not tried, 1: ready, -1: not available (said once) */
	const struct dl_fn fns[] = {
		DL_FN(api.open, cs_open),
		DL_FN(api.option, cs_option),
		DL_FN(api.malloc, cs_malloc),
		DL_FN(api.disasm_iter, cs_disasm_iter),
		DL_FN(api.regs_access, cs_regs_access),
		DL_FN(api.free, cs_free),
		DL_FN(api.close, cs_close),
	};
	char why[256];

	if (state)
		return state > 0 ? &api : NULL;
	state = -1;
	if (!dl_bind(CS_SONAME, fns, sizeof(fns) / sizeof(fns[0]), why, sizeof(why)))
		state = 1;
	else
		fprintf(stderr,
			"tokenscope: Go's crypto/tls is not hooked: %s could not be loaded (%s); "
			"install it (Debian: apt-get install libcapstone%d)\n",
			CS_SONAME, why, CS_API_MAJOR);
	return state > 0 ? &api : NULL;
}

#define X86_REX_B 0x41	    /* the REX prefix of a push of r8-r15 */
#define X86_PUSH_FIRST 0x50 /* push %rax .. push %rdi (with REX.B: %r8 .. %r15) */
#define X86_PUSH_LAST 0x57
#define X86_CALL_REL32 0xe8
/* arm64 `ret Xn` (RET x30 when Go and C compilers write `ret`): the register is bits 5-9. */
#define ARM64_INSN_BYTES 4
#define ARM64_RET_MASK 0xfffffc1fu
#define ARM64_RET 0xd65f0000u

bool insn_x86_thin_wrapper(const uint8_t *b, size_t n, uint64_t off, uint64_t *target)
{
	static const uint8_t sub_rsp_imm8[] = { 0x48, 0x83, 0xec };
	int32_t rel;

	if (n < INSN_X86_WRAPPER_BYTES || memcmp(b, sub_rsp_imm8, sizeof(sub_rsp_imm8)) ||
	    b[4] != X86_CALL_REL32)
		return false;
	memcpy(&rel, b + 5, sizeof(rel));
	*target = off + INSN_X86_WRAPPER_BYTES + (int64_t)rel;
	return true;
}

bool insn_x86_push(const uint8_t *b, size_t n)
{
	if (n >= 1 && b[0] >= X86_PUSH_FIRST && b[0] <= X86_PUSH_LAST)
		return true;
	return n >= 2 && b[0] == X86_REX_B && b[1] >= X86_PUSH_FIRST && b[1] <= X86_PUSH_LAST;
}

int insn_x86_rets(const uint8_t *b, size_t n, uint32_t *offs, int max)
{
	const uint8_t *p = b;
	uint64_t addr = 0;
	int found = 0, err = 0;
	const struct cs_api *c = cs();
	cs_insn *insn;
	csh h;

	if (!c)
		return -ENOENT;
	if (c->open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return -ENOMEM;
	insn = c->malloc(h);
	if (!insn) {
		c->close(&h);
		return -ENOMEM;
	}
	while (n) {
		if (!c->disasm_iter(h, &p, &n, &addr, insn)) {
			/* Go pads functions with INT3 (0xcc), which decodes; anything else is not a
			 * function we read whole. */
			err = -EINVAL;
			break;
		}
		if (insn->id == X86_INS_RET) {
			if (found < max)
				offs[found] = (uint32_t)insn->address;
			found++;
		}
	}
	c->free(insn, 1);
	c->close(&h);
	return err ? err : found;
}

/* Registers whose value an entry probe of Go code reads: the arguments, the goroutine, the
 * stack. */
static bool x86_go_reg(uint16_t r)
{
	static const uint16_t regs[] = {
		X86_REG_RAX,  X86_REG_EAX,  X86_REG_AX,	  X86_REG_AL,	X86_REG_AH,   X86_REG_RBX,
		X86_REG_EBX,  X86_REG_BX,   X86_REG_BL,	  X86_REG_BH,	X86_REG_RCX,  X86_REG_ECX,
		X86_REG_CX,   X86_REG_CL,   X86_REG_CH,	  X86_REG_RDI,	X86_REG_EDI,  X86_REG_DI,
		X86_REG_DIL,  X86_REG_RSI,  X86_REG_ESI,  X86_REG_SI,	X86_REG_SIL,  X86_REG_R8,
		X86_REG_R8D,  X86_REG_R8W,  X86_REG_R8B,  X86_REG_R9,	X86_REG_R9D,  X86_REG_R9W,
		X86_REG_R9B,  X86_REG_R10,  X86_REG_R10D, X86_REG_R10W, X86_REG_R10B, X86_REG_R11,
		X86_REG_R11D, X86_REG_R11W, X86_REG_R11B, X86_REG_R14,	X86_REG_R14D, X86_REG_R14W,
		X86_REG_R14B, X86_REG_RSP,  X86_REG_ESP,  X86_REG_SP,	X86_REG_SPL,
	};

	for (size_t i = 0; i < sizeof(regs) / sizeof(regs[0]); i++)
		if (regs[i] == r)
			return true;
	return false;
}

/* Instructions an x86-64 uprobe emulates instead of single-stepping (of those a prologue
 * has): a conditional jump, a push of a register. */
static bool x86_emulated(const cs_insn *insn)
{
	const cs_x86 *x = &insn->detail->x86;

	if (insn->id == X86_INS_PUSH)
		return x->op_count == 1 && x->operands[0].type == X86_OP_REG;
	if (insn->id == X86_INS_JMP || insn->id == X86_INS_JRCXZ || insn->id == X86_INS_JECXZ)
		return false;
	for (uint8_t i = 0; i < insn->detail->groups_count; i++)
		if (insn->detail->groups[i] == CS_GRP_JUMP)
			return x->op_count == 1 && x->operands[0].type == X86_OP_IMM;
	return false;
}

/* Instructions looked at for a cheaper entry: a Go prologue's jump is its third. */
#define X86_ENTRY_LOOK 6

uint32_t insn_x86_cheap_entry(const uint8_t *b, size_t n)
{
	const uint8_t *p = b;
	uint64_t addr = 0;
	uint32_t found = 0;
	const struct cs_api *c = cs();
	cs_insn *insn;
	csh h;

	if (!c || c->open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return 0;
	c->option(h, CS_OPT_DETAIL, CS_OPT_ON);
	insn = c->malloc(h);
	for (int k = 0; insn && k < X86_ENTRY_LOOK && c->disasm_iter(h, &p, &n, &addr, insn); k++) {
		cs_regs rd, wr;
		uint8_t nrd, nwr;
		bool clobbers = false;

		if (x86_emulated(insn)) {
			found = (uint32_t)insn->address;
			break;
		}
		if (c->regs_access(h, insn, rd, &nrd, wr, &nwr) != CS_ERR_OK)
			break;
		for (uint8_t i = 0; i < nwr; i++)
			clobbers |= x86_go_reg(wr[i]);
		if (clobbers)
			break;
	}
	if (insn)
		c->free(insn, 1);
	c->close(&h);
	return found;
}

int insn_arm64_rets(const uint8_t *b, size_t n, uint32_t *offs, int max)
{
	int found = 0;

	if (n % ARM64_INSN_BYTES)
		return -EINVAL;
	for (size_t off = 0; off < n; off += ARM64_INSN_BYTES) {
		/* Instructions are little-endian whatever the data's order. */
		uint32_t w = (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 |
			     (uint32_t)b[off + 2] << 16 | (uint32_t)b[off + 3] << 24;

		if ((w & ARM64_RET_MASK) != ARM64_RET)
			continue;
		if (found < max)
			offs[found] = (uint32_t)off;
		found++;
	}
	return found;
}
