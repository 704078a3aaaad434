/* SPDX-License-Identifier: MIT */
/*
 * The few machine instructions the loader reads, to probe where a uprobe is cheapest.
 *
 * A uprobe costs a trap, and a second one to single-step the probed instruction out of line
 * unless the kernel can emulate it (x86-64: a push of a register, a call, a jump). Some
 * exported functions are thin wrappers that start with an instruction the kernel must
 * single-step and only call another function with the same arguments (Debian's OpenSSL 3:
 * SSL_read_ex and SSL_write_ex); probing the function they call costs one trap less.
 */
#ifndef TS_INSN_H
#define TS_INSN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes insn_x86_thin_wrapper reads: `sub $imm8,%rsp` (4), then `call rel32` (5). */
#define INSN_X86_WRAPPER_BYTES 9

/*
 * Whether the n bytes at b, the start of a function at file offset off, are exactly `sub
 * $imm8,%rsp; call rel32`: then *target is the file offset the call goes to (offsets within one
 * segment differ as addresses do). The registers that carry the arguments are untouched before
 * the call, so the callee receives the wrapper's own arguments.
 */
bool insn_x86_thin_wrapper(const uint8_t *b, size_t n, uint64_t off, uint64_t *target);
/* Whether the n bytes at b start with a push of a register, which x86-64 uprobes emulate. */
bool insn_x86_push(const uint8_t *b, size_t n);
/*
 * The offsets (from b) of the RET instructions of the x86-64 function whose n bytes are at b,
 * decoded instruction by instruction (a 0xc3 byte inside another instruction is not one), up to
 * max into offs; returns how many there are (more than max: not all are in offs), or -EINVAL
 * when the bytes do not decode to the end. Where a uretprobe cannot be used (Go moves its
 * stacks), a probe on each RET sees the function return.
 */
int insn_x86_rets(const uint8_t *b, size_t n, uint32_t *offs, int max);
/*
 * Where in the function at b (its first n bytes) an entry probe costs one trap: the offset of
 * its first instruction the kernel emulates (a conditional jump, a push of a register) when
 * every instruction before it leaves the argument registers of Go's register ABI (RAX, RBX,
 * RCX, RDI, RSI, R8-R11), R14 (the goroutine) and RSP alone, within the first few
 * instructions; else 0, the function's start (its first instruction is single-stepped). Go's
 * prologue (`lea -N(%rsp),%r12; cmp 16(%r14),%r12; jbe morestack`) gives the jbe.
 */
uint32_t insn_x86_cheap_entry(const uint8_t *b, size_t n);
/*
 * The offsets (from b) of the RET instructions of the arm64 function whose n bytes are at b, up
 * to max into offs; returns how many there are (more than max: not all are in offs), or -EINVAL
 * when n is not whole instructions. arm64 instructions are 4 bytes, aligned: each word is one,
 * and no decoder is needed (a constant pool word that happened to equal a RET would get a probe
 * that never fires).
 */
int insn_arm64_rets(const uint8_t *b, size_t n, uint32_t *offs, int max);

#endif
