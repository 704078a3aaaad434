// SPDX-License-Identifier: MIT
/*
 * The BPF side's per-architecture assumptions (bpf/lib/syscalls.bpf.h and libbpf's register
 * macros), for x86 and arm64 whatever this test runs on: each syscall number against the
 * kernel's header, and each register read against the slot the ABI puts that register in.
 * The slots are written here as the ABI documents them; the ones of the architecture this
 * test is built for are checked against its own <asm/ptrace.h> too, so the native run checks
 * x86's and the run under qemu-user (tests/run.sh, group arm64) checks arm64's.
 */
#include <stddef.h>
#include <asm/ptrace.h>
#include <asm/unistd.h>

#include "arch.h"
#include "check.h"

/* x86-64's struct pt_regs, in 8-byte words: the kernel's (vmlinux.h: di, si, ...) and the
 * user-space view's (rdi, rsi, ...) are one layout. */
enum {
	X86_R10 = 7,
	X86_R14 = 1,
	X86_BX = 5,
	X86_AX = 10,
	X86_CX = 11,
	X86_DX = 12,
	X86_SI = 13,
	X86_DI = 14,
	X86_WORDS = 21,
};

/* arm64: x0..x30 in words 0..30, then sp, pc, pstate (struct user_pt_regs); the kernel's
 * struct pt_regs begins with that and goes on with orig_x0, the first syscall argument as it
 * was at entry (x0 is overwritten by the return value). */
enum {
	ARM64_USER_WORDS = 34,
	ARM64_ORIG_X0 = 34,
	ARM64_G = 28, /* Go's g register */
};

TEST(test_syscall_numbers)
{
	struct arch_info x86 = { 0 }, arm64 = { 0 };
	static const char *const names[ARCH_NSYS] = {
		"read",	  "write",  "close",	"readv",   "writev",  "connect",
		"accept", "sendto", "recvfrom", "sendmsg", "recvmsg", "accept4",
	};

	arch_x86_info(&x86);
	arch_arm64_info(&arm64);
	for (int i = 0; i < ARCH_NSYS; i++) {
		char label[64];

		snprintf(label, sizeof(label), "x86 %s", names[i]);
		ASSERT_EQ(x86.nr[i], x86.kernel_nr[i], label);
		snprintf(label, sizeof(label), "arm64 %s", names[i]);
		ASSERT_EQ(arm64.nr[i], arm64.kernel_nr[i], label);
	}
	/* And the header the compiler targets, where it is one of the two. */
#if defined(__x86_64__)
	ASSERT_EQ(x86.nr[ARCH_READ], __NR_read, "x86 read, <asm/unistd.h>");
	ASSERT_EQ(x86.nr[ARCH_ACCEPT4], __NR_accept4, "x86 accept4, <asm/unistd.h>");
	ASSERT_EQ(x86.nr[ARCH_RECVMSG], __NR_recvmsg, "x86 recvmsg, <asm/unistd.h>");
#elif defined(__aarch64__)
	ASSERT_EQ(arm64.nr[ARCH_READ], __NR_read, "arm64 read, <asm/unistd.h>");
	ASSERT_EQ(arm64.nr[ARCH_ACCEPT4], __NR_accept4, "arm64 accept4, <asm/unistd.h>");
	ASSERT_EQ(arm64.nr[ARCH_RECVMSG], __NR_recvmsg, "arm64 recvmsg, <asm/unistd.h>");
#endif
	/* The tables differ where it matters: one used for the other would fail above too. */
	ASSERT_EQ(arm64.nr[ARCH_READ], 63, "arm64 read");
	ASSERT_EQ(x86.nr[ARCH_READ], 0, "x86 read");
}

TEST(test_x86_registers)
{
	struct arch_info x86 = { 0 };

	arch_x86_info(&x86);
	ASSERT_EQ(x86.regs_size, X86_WORDS * 8, "x86 struct pt_regs size");
	/* C ABI arguments: rdi, rsi, rdx, rcx */
	ASSERT_EQ(x86.parm[0], ARCH_WORD(X86_DI), "x86 PT_REGS_PARM1");
	ASSERT_EQ(x86.parm[1], ARCH_WORD(X86_SI), "x86 PT_REGS_PARM2");
	ASSERT_EQ(x86.parm[2], ARCH_WORD(X86_DX), "x86 PT_REGS_PARM3");
	ASSERT_EQ(x86.parm[3], ARCH_WORD(X86_CX), "x86 PT_REGS_PARM4");
	/* syscall arguments: rdi, rsi, rdx, r10 (the syscall instruction clobbers rcx) */
	ASSERT_EQ(x86.sys[0], ARCH_WORD(X86_DI), "x86 PT_REGS_PARM1_SYSCALL");
	ASSERT_EQ(x86.sys[1], ARCH_WORD(X86_SI), "x86 PT_REGS_PARM2_SYSCALL");
	ASSERT_EQ(x86.sys[2], ARCH_WORD(X86_DX), "x86 PT_REGS_PARM3_SYSCALL");
	ASSERT_EQ(x86.sys[3], ARCH_WORD(X86_R10), "x86 PT_REGS_PARM4_SYSCALL");
	/* Go: g in r14; arguments rax, rbx, rcx; result rax */
	ASSERT_EQ(x86.go_g, ARCH_WORD(X86_R14), "x86 GO_REG_G");
	ASSERT_EQ(x86.go_arg[0], ARCH_WORD(X86_AX), "x86 GO_REG_ARG1");
	ASSERT_EQ(x86.go_arg[1], ARCH_WORD(X86_BX), "x86 GO_REG_ARG2");
	ASSERT_EQ(x86.go_arg[2], ARCH_WORD(X86_CX), "x86 GO_REG_ARG3");
	ASSERT_EQ(x86.go_ret, ARCH_WORD(X86_AX), "x86 GO_REG_RET1");
#if defined(__x86_64__)
	ASSERT_EQ(offsetof(struct pt_regs, rdi) / 8, X86_DI, "<asm/ptrace.h> rdi");
	ASSERT_EQ(offsetof(struct pt_regs, rsi) / 8, X86_SI, "<asm/ptrace.h> rsi");
	ASSERT_EQ(offsetof(struct pt_regs, rdx) / 8, X86_DX, "<asm/ptrace.h> rdx");
	ASSERT_EQ(offsetof(struct pt_regs, rcx) / 8, X86_CX, "<asm/ptrace.h> rcx");
	ASSERT_EQ(offsetof(struct pt_regs, r10) / 8, X86_R10, "<asm/ptrace.h> r10");
	ASSERT_EQ(offsetof(struct pt_regs, r14) / 8, X86_R14, "<asm/ptrace.h> r14");
	ASSERT_EQ(offsetof(struct pt_regs, rax) / 8, X86_AX, "<asm/ptrace.h> rax");
	ASSERT_EQ(offsetof(struct pt_regs, rbx) / 8, X86_BX, "<asm/ptrace.h> rbx");
	ASSERT_EQ(sizeof(struct pt_regs), X86_WORDS * 8, "<asm/ptrace.h> pt_regs size");
#endif
}

TEST(test_arm64_registers)
{
	struct arch_info arm64 = { 0 };

	arch_arm64_info(&arm64);
	/* BPF_KPROBE reads a uprobe's registers as struct user_pt_regs: x0..x3 */
	ASSERT_EQ(arm64.parm[0], ARCH_WORD(0), "arm64 PT_REGS_PARM1");
	ASSERT_EQ(arm64.parm[1], ARCH_WORD(1), "arm64 PT_REGS_PARM2");
	ASSERT_EQ(arm64.parm[2], ARCH_WORD(2), "arm64 PT_REGS_PARM3");
	ASSERT_EQ(arm64.parm[3], ARCH_WORD(3), "arm64 PT_REGS_PARM4");
	ASSERT_EQ(arm64.user_regs_word, 0, "vmlinux.h user_pt_regs.regs");
	ASSERT_EQ(arm64.pt_regs_regs_word, 0, "vmlinux.h pt_regs.regs (a user_pt_regs there)");
	/* syscall arguments 2..4: x1..x3 */
	ASSERT_EQ(arm64.sys[1], ARCH_WORD(1), "arm64 PT_REGS_PARM2_SYSCALL");
	ASSERT_EQ(arm64.sys[2], ARCH_WORD(2), "arm64 PT_REGS_PARM3_SYSCALL");
	ASSERT_EQ(arm64.sys[3], ARCH_WORD(3), "arm64 PT_REGS_PARM4_SYSCALL");
	/* The first: orig_x0, by a CO-RE read of a pt_regs flavour libbpf relocates by name to
	 * the kernel's struct pt_regs, where vmlinux.h has it after the user registers. */
	ASSERT_TRUE(strstr(arm64.sys1_text, "orig_x0") != NULL,
		    "PT_REGS_PARM1_SYSCALL reads orig_x0");
	ASSERT_TRUE(strstr(arm64.sys1_text, "pt_regs___arm64") != NULL,
		    "PT_REGS_PARM1_SYSCALL reads a struct pt_regs flavour");
	ASSERT_TRUE(strstr(arm64.sys1_text, "regs[0]") == NULL, "PT_REGS_PARM1_SYSCALL is not x0");
	ASSERT_EQ(arm64.orig_x0_word, ARM64_ORIG_X0, "vmlinux.h pt_regs.orig_x0");
	/* Go: g in x28; arguments x0, x1, x2; result x0 */
	ASSERT_EQ(arm64.go_g, ARCH_WORD(ARM64_G), "arm64 GO_REG_G");
	ASSERT_EQ(arm64.go_arg[0], ARCH_WORD(0), "arm64 GO_REG_ARG1");
	ASSERT_EQ(arm64.go_arg[1], ARCH_WORD(1), "arm64 GO_REG_ARG2");
	ASSERT_EQ(arm64.go_arg[2], ARCH_WORD(2), "arm64 GO_REG_ARG3");
	ASSERT_EQ(arm64.go_ret, ARCH_WORD(0), "arm64 GO_REG_RET1");
#if defined(__aarch64__)
	ASSERT_EQ(offsetof(struct user_pt_regs, regs), 0, "<asm/ptrace.h> user_pt_regs.regs");
	ASSERT_EQ(sizeof(struct user_pt_regs), ARM64_USER_WORDS * 8, "<asm/ptrace.h> size");
#endif
}

int main(void)
{
	return check_run_all();
}
