// SPDX-License-Identifier: MIT
/*
 * One architecture's BPF-side view (arch.h), built on the host with that architecture's
 * vmlinux.h and __TARGET_ARCH_ (the Makefile builds this file once for each): the macros are
 * the ones the BPF programs expand, reading the kernel's struct pt_regs by the same names.
 * ARCH_FN names the function.
 */
/* Plain struct reads: CO-RE relocations mean nothing to a host compiler. */
#define BPF_NO_PRESERVE_ACCESS_INDEX
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "lib/syscalls.bpf.h"
#if defined(__TARGET_ARCH_x86)
#include <asm/unistd_64.h>
#else
#include <asm-generic/unistd.h>
#endif
#include "arch.h"

#define ARCH_STR(x) #x
#define ARCH_XSTR(x) ARCH_STR(x)

_Static_assert(sizeof(struct pt_regs) <= ARCH_WORDS * 8, "ARCH_WORDS too small");

void ARCH_FN(struct arch_info *info)
{
	static union {
		struct pt_regs regs;
		unsigned long w[ARCH_WORDS];
	} u;
	const long nr[ARCH_NSYS] = { NR_READ,	  NR_WRITE,   NR_CLOSE,	  NR_READV,
				     NR_WRITEV,	  NR_CONNECT, NR_ACCEPT,  NR_SENDTO,
				     NR_RECVFROM, NR_SENDMSG, NR_RECVMSG, NR_ACCEPT4 };
	const long knr[ARCH_NSYS] = { __NR_read,     __NR_write,   __NR_close,	 __NR_readv,
				      __NR_writev,   __NR_connect, __NR_accept,	 __NR_sendto,
				      __NR_recvfrom, __NR_sendmsg, __NR_recvmsg, __NR_accept4 };
	struct pt_regs *regs = &u.regs;

	for (int i = 0; i < ARCH_NSYS; i++) {
		info->nr[i] = nr[i];
		info->kernel_nr[i] = knr[i];
	}
	for (int i = 0; i < ARCH_WORDS; i++)
		u.w[i] = ARCH_WORD(i);
	info->parm[0] = PT_REGS_PARM1(regs);
	info->parm[1] = PT_REGS_PARM2(regs);
	info->parm[2] = PT_REGS_PARM3(regs);
	info->parm[3] = PT_REGS_PARM4(regs);
#if defined(__TARGET_ARCH_arm64)
	/* A BPF_CORE_READ of orig_x0 through a "flavour" of struct pt_regs that has that field
	 * alone: only the load-time relocation (by field name) gives it its offset, so it is
	 * checked by its text and by vmlinux.h's layout instead of run here. */
	info->sys[0] = 0;
	info->orig_x0_word = __builtin_offsetof(struct pt_regs, orig_x0) / 8;
	info->user_regs_word = __builtin_offsetof(struct user_pt_regs, regs) / 8;
	info->pt_regs_regs_word = __builtin_offsetof(struct pt_regs, regs) / 8;
#else
	info->sys[0] = PT_REGS_PARM1_SYSCALL(regs);
	info->orig_x0_word = info->user_regs_word = info->pt_regs_regs_word = -1;
#endif
	info->sys[1] = PT_REGS_PARM2_SYSCALL(regs);
	info->sys[2] = PT_REGS_PARM3_SYSCALL(regs);
	info->sys[3] = PT_REGS_PARM4_SYSCALL(regs);
	info->sys1_text = ARCH_XSTR(PT_REGS_PARM1_SYSCALL(regs));
	info->go_g = GO_REG_G(regs);
	info->go_arg[0] = GO_REG_ARG1(regs);
	info->go_arg[1] = GO_REG_ARG2(regs);
	info->go_arg[2] = GO_REG_ARG3(regs);
	info->go_ret = GO_REG_RET1(regs);
	info->regs_size = sizeof(struct pt_regs);
}
