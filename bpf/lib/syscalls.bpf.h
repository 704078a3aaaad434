/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The syscall numbers the programs match, x86_64 only (the Makefile refuses another
 * architecture until its table is here).
 * Part of tokenscope.bpf.c, which includes the parts in order; not a header to include alone.
 */
#ifndef TS_BPF_SYSCALLS_H
#define TS_BPF_SYSCALLS_H

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

/* recv flags (include/linux/socket.h; the same on every architecture) */
#define TS_MSG_PEEK 0x2

#endif
