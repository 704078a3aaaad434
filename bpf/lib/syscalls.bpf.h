/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What the programs assume of the architecture, in one place: the numbers of the syscalls they
 * match, and the registers Go's register ABI uses. The Makefile sets __TARGET_ARCH_x86 or
 * __TARGET_ARCH_arm64 (which bpf_tracing.h reads too, for the C ABI's argument registers); any
 * other architecture stops the build here rather than trace the wrong syscalls.
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone
 * (tests/unit/arch_bpf.c includes it on the host, to check it against the kernel's headers).
 */
#ifndef TS_BPF_SYSCALLS_H
#define TS_BPF_SYSCALLS_H

#if defined(__TARGET_ARCH_x86)

/* x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl). */
#define NR_READ 0
#define NR_WRITE 1
#define NR_CLOSE 3
#define NR_READV 19
#define NR_WRITEV 20
#define NR_CONNECT 42
#define NR_ACCEPT 43
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_ACCEPT4 288

/* The number of the syscall a sys_exit program runs for, from the syscall's saved registers. */
#define TS_SYSCALL_NR(regs) ((regs)->orig_ax)
/* A syscall's own function, which takes the registers it was made with (the syscall wrapper). */
#define TS_SYSCALL_FN(name) "__x64_sys_" #name

/* Go's register ABI on amd64: the goroutine's g in R14; arguments and results in RAX, RBX,
 * RCX, ... */
#define GO_REG_G(r) ((r)->r14)
#define GO_REG_ARG1(r) ((r)->ax)
#define GO_REG_ARG2(r) ((r)->bx)
#define GO_REG_ARG3(r) ((r)->cx)
#define GO_REG_RET1(r) ((r)->ax)

#elif defined(__TARGET_ARCH_arm64)

/* arm64 takes the kernel's generic syscall table, which has no open, poll or select: none of
 * them is matched here anyway (test_arch checks these against the kernel's header). */
#define NR_READ 63
#define NR_WRITE 64
#define NR_CLOSE 57
#define NR_READV 65
#define NR_WRITEV 66
#define NR_CONNECT 203
#define NR_ACCEPT 202
#define NR_SENDTO 206
#define NR_RECVFROM 207
#define NR_SENDMSG 211
#define NR_RECVMSG 212
#define NR_ACCEPT4 242

#define TS_SYSCALL_NR(regs) ((regs)->syscallno)
#define TS_SYSCALL_FN(name) "__arm64_sys_" #name

/* Go's register ABI on arm64: g in R28; arguments and results in R0, R1, R2, ... The kernel's
 * struct pt_regs and a uprobe's context both hold them in regs[]. */
#define GO_REG_G(r) ((r)->regs[28])
#define GO_REG_ARG1(r) ((r)->regs[0])
#define GO_REG_ARG2(r) ((r)->regs[1])
#define GO_REG_ARG3(r) ((r)->regs[2])
#define GO_REG_RET1(r) ((r)->regs[0])

#else
#error "no syscall table for this architecture: build with __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

/* recv flags (include/linux/socket.h; the same on every architecture) */
#define TS_MSG_PEEK 0x2
/* mmap prot and flags: an executable mapping, an anonymous one (the same on x86 and arm64) */
#define TS_PROT_EXEC 0x4
#define TS_MAP_ANONYMOUS 0x20

#endif
