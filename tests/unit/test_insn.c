// SPDX-License-Identifier: MIT
/*
 * user/loader/insn.c: the thin wrappers whose callee is probed instead (their first instruction
 * would be single-stepped), on the bytes of Debian's OpenSSL 3 and on what must not pass.
 */
#include <errno.h>

#include "check.h"
#include "loader/insn.h"

/* SSL_write_ex of Debian bookworm's libssl.so.3 (file offset 0x35a10): sub $0x8,%rsp; call
 * 0x355a0 (ssl_write_internal, which starts with push %r14: 41 56). */
static const uint8_t ssl_write_ex[] = { 0x48, 0x83, 0xec, 0x08, 0xe8, 0x87, 0xfb, 0xff, 0xff };

TEST(test_thin_wrapper)
{
	uint64_t target = 0;

	ASSERT_TRUE(insn_x86_thin_wrapper(ssl_write_ex, sizeof(ssl_write_ex), 0x35a10, &target),
		    "SSL_write_ex is a thin wrapper");
	ASSERT_EQ(target, 0x355a0, "its call goes to the internal write");
}

TEST(test_not_thin_wrappers)
{
	/* SSL_write: sub $0x18,%rsp, then the stack protector's load (mov %fs:0x28,%rax). */
	static const uint8_t ssl_write[] = { 0x48, 0x83, 0xec, 0x18, 0x64, 0x48, 0x8b, 0x04, 0x25 };
	/* Node's SSL_write_ex: push %rbp; mov %rsp,%rbp; push %r15. */
	static const uint8_t node[] = { 0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x41, 0x56, 0x41 };
	/* sub $imm32,%rsp (48 81 ec): not the form read. */
	static const uint8_t sub32[] = { 0x48, 0x81, 0xec, 0x08, 0x00, 0x00, 0x00, 0xe8, 0x00 };
	uint64_t target = 7;

	ASSERT_FALSE(insn_x86_thin_wrapper(ssl_write, sizeof(ssl_write), 0x35980, &target),
		     "a function that does more before its call");
	ASSERT_FALSE(insn_x86_thin_wrapper(node, sizeof(node), 0, &target), "a push first");
	ASSERT_FALSE(insn_x86_thin_wrapper(sub32, sizeof(sub32), 0, &target), "sub imm32");
	ASSERT_FALSE(
	    insn_x86_thin_wrapper(ssl_write_ex, sizeof(ssl_write_ex) - 1, 0x35a10, &target),
	    "fewer bytes than the two instructions");
	ASSERT_EQ(target, 7, "target untouched");
}

TEST(test_backward_call)
{
	/* call -0x10 from a wrapper at 0x1000: to 0x1000 + 9 - 0x10. */
	static const uint8_t back[] = { 0x48, 0x83, 0xec, 0x08, 0xe8, 0xf0, 0xff, 0xff, 0xff };
	uint64_t target = 0;

	ASSERT_TRUE(insn_x86_thin_wrapper(back, sizeof(back), 0x1000, &target), "a wrapper");
	ASSERT_EQ(target, 0xff9, "a negative displacement");
}

TEST(test_push)
{
	static const uint8_t r14[] = { 0x41, 0x56 }, rbp[] = { 0x55 }, rbx[] = { 0x53 };
	static const uint8_t sub[] = { 0x48, 0x83 }, rex_mov[] = { 0x41, 0x89 },
			     r8_only[] = { 0x41 };

	ASSERT_TRUE(insn_x86_push(r14, sizeof(r14)), "push %r14");
	ASSERT_TRUE(insn_x86_push(rbp, sizeof(rbp)), "push %rbp");
	ASSERT_TRUE(insn_x86_push(rbx, sizeof(rbx)), "push %rbx");
	ASSERT_FALSE(insn_x86_push(sub, sizeof(sub)), "sub");
	ASSERT_FALSE(insn_x86_push(rex_mov, sizeof(rex_mov)), "a REX.B mov");
	ASSERT_FALSE(insn_x86_push(r8_only, sizeof(r8_only)), "a prefix alone");
	ASSERT_FALSE(insn_x86_push(rbp, 0), "no bytes");
}

/* A function shaped as Go's compiler lays them out: the stack check, a frame, two returns,
 * INT3 padding; 0xc3 bytes inside an immediate and a displacement are not returns. */
TEST(test_rets)
{
	static const uint8_t fn[] = {
		0x49, 0x3b, 0x66, 0x10,	      /* 0: cmp 0x10(%r14),%rsp */
		0x76, 0x20,		      /* 4: jbe */
		0x55,			      /* 6: push %rbp */
		0x48, 0x89, 0xe5,	      /* 7: mov %rsp,%rbp */
		0x48, 0x83, 0xec, 0x10,	      /* 10: sub $0x10,%rsp */
		0xb8, 0xc3, 0x00, 0x00, 0x00, /* 14: mov $0xc3,%eax */
		0x48, 0x83, 0xc4, 0x10,	      /* 19: add $0x10,%rsp */
		0x5d,			      /* 23: pop %rbp */
		0xc3,			      /* 24: ret */
		0x48, 0x8b, 0x44, 0x24, 0xc3, /* 25: mov -0x3d(%rsp),%rax */
		0xc3,			      /* 30: ret */
		0xcc, 0xcc,		      /* 31: int3 padding */
	};
	static const uint8_t cut[] = { 0x55, 0xb8, 0xc3 }; /* a mov cut short */
	uint32_t offs[4];

	if (ASSERT_EQ(insn_x86_rets(fn, sizeof(fn), offs, 4), 2, "two returns")) {
		ASSERT_EQ(offs[0], 24, "the first");
		ASSERT_EQ(offs[1], 30, "the second");
	}
	ASSERT_EQ(insn_x86_rets(fn, sizeof(fn), offs, 1), 2, "counted past max");
	ASSERT_EQ(offs[0], 24, "the first kept");
	ASSERT_EQ(insn_x86_rets(cut, sizeof(cut), offs, 4), -EINVAL, "bytes that do not decode");
}

/* arm64: every 4-byte word is an instruction; RET with any register is one, a branch to a
 * register (br, blr) and a word off by a bit are not. */
TEST(test_arm64_rets)
{
	static const uint8_t fn[] = {
		0x90, 0x0b, 0x40, 0xf9, /* 0: ldr x16, [x28, #16] (Go's stack check) */
		0xff, 0x63, 0x30, 0xeb, /* 4: cmp sp, x16 */
		0x09, 0x02, 0x00, 0x54, /* 8: b.ls */
		0xfd, 0x7b, 0xbf, 0xa9, /* 12: stp x29, x30, [sp, #-16]! */
		0xc0, 0x03, 0x5f, 0xd6, /* 16: ret */
		0x00, 0x02, 0x1f, 0xd6, /* 20: br x16 */
		0x20, 0x00, 0x3f, 0xd6, /* 24: blr x1 */
		0xc1, 0x03, 0x5f, 0xd6, /* 28: not an instruction: ret's word with bit 0 set */
		0x20, 0x02, 0x5f, 0xd6, /* 32: ret x17 */
	};
	uint32_t offs[4];

	if (ASSERT_EQ(insn_arm64_rets(fn, sizeof(fn), offs, 4), 2, "two returns")) {
		ASSERT_EQ(offs[0], 16, "ret");
		ASSERT_EQ(offs[1], 32, "ret x17");
	}
	ASSERT_EQ(insn_arm64_rets(fn, sizeof(fn), offs, 1), 2, "counted past max");
	ASSERT_EQ(insn_arm64_rets(fn, sizeof(fn) - 2, offs, 4), -EINVAL, "not whole instructions");
}

/* Where an entry probe costs one trap: the jump of Go's stack check, which the kernel
 * emulates, when nothing before it touches the argument registers, R14 or RSP. */
TEST(test_cheap_entry)
{
	/* crypto/tls.(*Conn).Write of Go 1.19: a frame larger than the stack guard's slack. */
	static const uint8_t go_big[] = {
		0x4c, 0x8d, 0x64, 0x24, 0x98,		  /* lea -0x68(%rsp),%r12 */
		0x4d, 0x3b, 0x66, 0x10,			  /* cmp 0x10(%r14),%r12 */
		0x0f, 0x86, 0x64, 0x07, 0x00, 0x00,	  /* jbe morestack */
		0x48, 0x81, 0xec, 0xe8, 0x00, 0x00, 0x00, /* sub $0xe8,%rsp */
	};
	/* A small frame: the check compares RSP itself. */
	static const uint8_t go_small[] = { 0x49, 0x3b, 0x66, 0x10, /* cmp 0x10(%r14),%rsp */
					    0x76, 0x2a,		    /* jbe */
					    0x55 };		    /* push %rbp */
	/* RAX written before the first jump: its value at the jump is not the argument. */
	static const uint8_t clobber[] = { 0xb8, 0x01, 0x00, 0x00, 0x00, /* mov $1,%eax */
					   0x74, 0x02,			 /* je */
					   0xc3 };
	/* A C function: its push first, at the start. */
	static const uint8_t c_fn[] = { 0x55, 0x48, 0x89, 0xe5 };

	ASSERT_EQ(insn_x86_cheap_entry(go_big, sizeof(go_big)), 9, "the jbe after lea and cmp");
	ASSERT_EQ(insn_x86_cheap_entry(go_small, sizeof(go_small)), 4, "the jbe after cmp");
	ASSERT_EQ(insn_x86_cheap_entry(clobber, sizeof(clobber)), 0, "the start");
	ASSERT_EQ(insn_x86_cheap_entry(c_fn, sizeof(c_fn)), 0, "the push at the start");
	ASSERT_EQ(insn_x86_cheap_entry(go_big, 5), 0, "cut before the jump: the start");
}

int main(void)
{
	return check_run_all();
}
