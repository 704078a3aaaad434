/* SPDX-License-Identifier: MIT */
/*
 * What test_arch reads of each architecture's build of arch_bpf.c: the BPF side's syscall
 * table next to the kernel headers' numbers, and what libbpf's register macros and
 * syscalls.bpf.h's Go registers read from a register set whose every 8-byte word holds its own
 * index (ARCH_WORD), so a value read names the slot it came from. Plain C types only: the two
 * sides include a vmlinux.h and libc's headers, which cannot meet.
 */
#ifndef TS_TEST_ARCH_H
#define TS_TEST_ARCH_H

/* The syscalls syscalls.bpf.h numbers, in this order. */
enum {
	ARCH_READ,
	ARCH_WRITE,
	ARCH_CLOSE,
	ARCH_READV,
	ARCH_WRITEV,
	ARCH_CONNECT,
	ARCH_ACCEPT,
	ARCH_SENDTO,
	ARCH_RECVFROM,
	ARCH_SENDMSG,
	ARCH_RECVMSG,
	ARCH_ACCEPT4,
	ARCH_NSYS,
};

/* Far from any real register value, so a word read from outside the set cannot pass. */
#define ARCH_WORD(i) (0x7500u + (unsigned long)(i))
/* The register set, in 8-byte words: larger than any architecture's struct pt_regs. */
#define ARCH_WORDS 64

struct arch_info {
	long nr[ARCH_NSYS];	   /* NR_* of syscalls.bpf.h */
	long kernel_nr[ARCH_NSYS]; /* __NR_* of the kernel's header for the architecture */
	/* Read from the register set by PT_REGS_PARMn (uprobes: BPF_KPROBE's arguments) and
	 * PT_REGS_PARMn_SYSCALL (the sys_enter program), n = 1..4 at [n - 1]: the ones the BPF
	 * programs use. On arm64 the first syscall argument is a CO-RE read (below): 0 there. */
	unsigned long parm[4], sys[4];
	unsigned long go_g, go_arg[3], go_ret; /* GO_REG_* */
	/* PT_REGS_PARM1_SYSCALL as the preprocessor expands it */
	const char *sys1_text;
	unsigned long regs_size; /* sizeof the kernel's struct pt_regs, in vmlinux.h */
	long orig_x0_word;	 /* arm64: pt_regs.orig_x0's word in vmlinux.h; else -1 */
	long user_regs_word;	 /* arm64: user_pt_regs.regs's word (the uprobe context); else -1 */
	long pt_regs_regs_word;	 /* arm64: pt_regs.regs's word; else -1 */
};

void arch_x86_info(struct arch_info *info);
void arch_arm64_info(struct arch_info *info);

#endif
