// SPDX-License-Identifier: MIT
#include <capstone/capstone.h>
#include <errno.h>
#include <string.h>

#include "loader/insn.h"

#define X86_REX_B 0x41	    /* the REX prefix of a push of r8-r15 */
#define X86_PUSH_FIRST 0x50 /* push %rax .. push %rdi (with REX.B: %r8 .. %r15) */
#define X86_PUSH_LAST 0x57
#define X86_CALL_REL32 0xe8

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
	cs_insn *insn;
	csh h;

	if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
		return -ENOMEM;
	insn = cs_malloc(h);
	if (!insn) {
		cs_close(&h);
		return -ENOMEM;
	}
	while (n) {
		if (!cs_disasm_iter(h, &p, &n, &addr, insn)) {
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
	cs_free(insn, 1);
	cs_close(&h);
	return err ? err : found;
}
