// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <linux/bpf.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "loader/features.h"

/* The start's message stays within a terminal this wide. */
#define FEATURES_TEXT_COLS 100

static const struct feature_row rows[] = {
#define FEATURE_ROW(id, name, since, what, without, lost) \
	{ name, since, what, without, lost, offsetof(struct features, id) },
	FEATURES(FEATURE_ROW)
#undef FEATURE_ROW
};

size_t features_count(void)
{
	return sizeof(rows) / sizeof(rows[0]);
}

const struct feature_row *features_row(size_t i)
{
	return i < features_count() ? &rows[i] : NULL;
}

bool features_has(const struct features *f, size_t i)
{
	return i < features_count() && *(const bool *)((const char *)f + rows[i].offset);
}

/* A helper the tracing programs may call, asked of a kprobe program (the same helpers, and
 * libbpf can load one to ask). */
static bool has_helper(enum bpf_func_id id)
{
	return libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, id, NULL) == 1;
}

/* Atomic or with fetch on a stack slot: the instructions of Linux 5.12 (BPF_ATOMIC beyond add).
 * Before it the same opcode was BPF_XADD, whose immediate had to be 0. */
static bool has_atomics(void)
{
	const struct bpf_insn prog[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 0 },
		{ .code = BPF_STX | BPF_MEM | BPF_DW,
		  .dst_reg = BPF_REG_10,
		  .src_reg = BPF_REG_1,
		  .off = -8 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 1 },
		{ .code = BPF_STX | BPF_ATOMIC | BPF_DW,
		  .dst_reg = BPF_REG_10,
		  .src_reg = BPF_REG_1,
		  .off = -8,
		  .imm = BPF_OR | BPF_FETCH },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, NULL, "GPL", prog,
			       sizeof(prog) / sizeof(prog[0]), NULL);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

/* A raw tracepoint's BTF type: tp_btf programs attach only where the kernel describes it. */
static bool has_tracepoint_btf(const struct btf *vmlinux, const char *tp)
{
	char name[128];

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	return vmlinux && btf__find_by_name_kind(vmlinux, name, BTF_KIND_TYPEDEF) >= 0;
}

/* A syscall's own function, which takes the registers it was made with (as bpf/lib/syscalls.bpf.h
 * names it). x86_64 only for now: with the programs on arm64's functions, the tests' emulated
 * arm64 machine (Linux 6.12, two CPUs under TCG, where x86 text patching once oopsed) did not
 * finish the BPF tests within their 15 minutes, which is not understood yet; arm64 keeps the
 * raw syscall tracepoints. */
#if defined(__x86_64__)
#define SYSCALL_FN_PREFIX "__x64_sys_"
#else
#define SYSCALL_FN_PREFIX ""
#endif

/* An fentry program that reads the registers write's function is given, as the syscall programs
 * do, put on it and taken off: 0, or why not. Each step can be refused apart: Linux 5.10's BTF
 * gives that argument a declaration without its fields, where nothing can be read through it;
 * a kernel without the trampolines of its architecture loads the program and refuses the
 * attach. */
/* The followed syscalls whose functions the syscall programs hook (tokenscope.bpf.c:
 * SYSCALL_HOOKS; a name there missing here loads on a kernel the probe did not ask). */
static const char *const fentry_syscalls[] = {
	"write", "read",    "readv",   "recvfrom", "recvmsg", "writev",
	"sendto", "sendmsg", "accept", "accept4", "close",
};

static int fentry_probe(const struct btf *vmlinux)
{
	const struct bpf_insn prog[] = {
		/* r1 = the first argument (struct pt_regs *); r0 = its first field */
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_1, .src_reg = BPF_REG_1 },
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_0, .src_reg = BPF_REG_1 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int fd = -1, err = 0;

	if (!SYSCALL_FN_PREFIX[0])
		return -EOPNOTSUPP;
	if (!vmlinux)
		return -ENOENT;
	/* Each function: its BTF may describe the argument in one compilation unit and not in
	 * another (5.10: write's, not recvfrom's). Then one attach, for the architecture. */
	for (size_t i = 0; !err && i < sizeof(fentry_syscalls) / sizeof(fentry_syscalls[0]); i++) {
		char name[64];
		int id;

		snprintf(name, sizeof(name), "%s%s", SYSCALL_FN_PREFIX, fentry_syscalls[i]);
		id = btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC);
		if (id < 0)
			return -ENOENT;
		LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = BPF_TRACE_FENTRY,
			    .attach_btf_id = (__u32)id);
		if (fd >= 0)
			close(fd);
		fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, "ts_fentry", "GPL", prog,
				   sizeof(prog) / sizeof(prog[0]), &o);
		if (fd < 0)
			return -errno;
	}
	{
		int link = bpf_raw_tracepoint_open(NULL, fd);

		if (link < 0)
			err = -errno;
		else
			close(link);
	}
	close(fd);
	return err;
}

void features_probe(struct features *f)
{
	struct utsname u;
	struct btf *vmlinux;

	memset(f, 0, sizeof(*f));
	if (!uname(&u))
		snprintf(f->release, sizeof(f->release), "%s", u.release);
	f->btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
	vmlinux = f->btf ? btf__load_vmlinux_btf() : NULL;
	if (libbpf_get_error(vmlinux))
		vmlinux = NULL;
	f->probed = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_HASH, NULL) == 1;
	f->task_storage = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1;
	f->task_btf = has_helper(BPF_FUNC_get_current_task_btf);
	f->atomics = has_atomics();
	f->loop = has_helper(BPF_FUNC_loop);
	f->callbacks = has_helper(BPF_FUNC_for_each_map_elem);
	f->cookie = has_helper(BPF_FUNC_get_attach_cookie);
	f->rx_ready = has_tracepoint_btf(vmlinux, "sk_data_ready");
	f->fentry_err = fentry_probe(vmlinux);
	f->fentry = f->fentry_err == 0;
	btf__free(vmlinux);
	features_force_off(f, getenv(FEATURES_OFF_ENV));
}

void features_force_off(struct features *f, const char *names)
{
	/* The object's choice follows: no atomics, no callbacks either (the legacy object). */
	for (const char *p = names; p && *p;) {
		size_t n = strcspn(p, ",");

		if (n == 6 && !strncmp(p, "fentry", 6) && f->fentry) {
			f->forced = true;
			f->fentry = false;
			f->fentry_err = -EPERM;
		}
		for (size_t i = 0; i < features_count(); i++)
			if (strlen(rows[i].name) == n && !strncmp(rows[i].name, p, n)) {
				f->forced |= features_has(f, i);
				*(bool *)((char *)f + rows[i].offset) = false;
			}
		p += n + (p[n] == ',');
	}
}

/* text wrapped at spaces within FEATURES_TEXT_COLS, continued lines indented, into buf. */
static void wrap(const char *text, char *buf, size_t n)
{
	size_t at = 0, col = 0;

	for (const char *w = text; *w && at + 1 < n;) {
		size_t len = strcspn(w, " ");
		int k;

		if (col && col + 1 + len > FEATURES_TEXT_COLS) {
			k = snprintf(buf + at, n - at, "\n  %.*s", (int)len, w);
			col = 2 + len;
		} else {
			k = snprintf(buf + at, n - at, "%s%.*s", col ? " " : "", (int)len, w);
			col += len + (col ? 1 : 0);
		}
		if (k < 0)
			break;
		at = at + (size_t)k < n ? at + (size_t)k : n - 1;
		w += len;
		while (*w == ' ')
			w++;
	}
	snprintf(buf + at, n - at, "\n");
}

void features_off_text(const struct features *f, char *buf, size_t n)
{
	char text[1024];
	size_t at, off = 0, k = 0;
	bool equivalent = false;

	buf[0] = 0;
	for (size_t i = 0; i < features_count(); i++)
		off += !features_has(f, i);
	if (!off || !n)
		return;
	at = (size_t)snprintf(text, sizeof(text), "tokenscope: Linux %s %s", f->release,
			      f->forced ? "goes without (" FEATURES_OFF_ENV ")" : "lacks");
	for (size_t i = 0; i < features_count() && at < sizeof(text); i++) {
		if (features_has(f, i))
			continue;
		equivalent |= !rows[i].lost;
		at += (size_t)snprintf(text + at, sizeof(text) - at, " %s (%s)%s", rows[i].name,
				       rows[i].since, ++k < off ? "," : ":");
	}
	if (equivalent && at < sizeof(text))
		at += (size_t)snprintf(text + at, sizeof(text) - at,
				       " equivalents stand in (tokenscope check says which)");
	for (size_t i = 0; i < features_count() && at < sizeof(text); i++)
		if (!features_has(f, i) && rows[i].lost)
			at += (size_t)snprintf(text + at, sizeof(text) - at, "%s %s",
					       equivalent ? ";" : "", rows[i].lost);
	wrap(text, buf, n);
}
