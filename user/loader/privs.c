// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/capability.h>

#include "loader/privs.h"
#include "loader/proc.h"
#include "loader/uprobes.h"

uint64_t privs_caps(bool *seccomp)
{
	char text[4096], *p;
	uint64_t caps = ~0ull;

	*seccomp = false;
	if (proc_read_file("/proc/self/status", text, sizeof(text)) <= 0)
		return caps;
	if ((p = strstr(text, "\nCapEff:")))
		caps = strtoull(p + 8, NULL, 16);
	if ((p = strstr(text, "\nSeccomp:")))
		*seccomp = strtol(p + 9, NULL, 10) == 2;
	return caps;
}

bool privs_has(uint64_t caps, int cap)
{
	return caps >> cap & 1;
}

/* Whether this process runs in a user namespace other than the initial one, whose
 * capabilities do not count for loading BPF programs. */
static bool in_user_ns(void)
{
	char text[128];
	unsigned long long inside, outside, count;

	return proc_read_file("/proc/self/uid_map", text, sizeof(text)) > 0 &&
	       (sscanf(text, "%llu %llu %llu", &inside, &outside, &count) != 3 || inside ||
		outside || count != 4294967295ull);
}

/* lsm_list_modules(2), Linux 6.8: the same number on every architecture. */
#define NR_LSM_LIST_MODULES 461

/*
 * The security modules active in this kernel, by name and comma-separated, into out ("" when
 * not known): from lsm_list_modules(2), else from securityfs.
 */
static void active_lsms(char *out, size_t n)
{
	/* LSM_ID_* of <linux/lsm.h>, from 100 on. */
	static const char *const names[] = { "capability", "selinux", "smack",	  "tomoyo",
					     "apparmor",   "yama",    "loadpin",  "safesetid",
					     "lockdown",   "bpf",     "landlock", "ima",
					     "evm",	   "ipe" };
	uint64_t ids[32];
	uint32_t size = sizeof(ids);
	long got = syscall(NR_LSM_LIST_MODULES, ids, &size, 0);
	size_t len = 0;

	out[0] = 0;
	if (got < 0) {
		if (proc_read_file("/sys/kernel/security/lsm", out, n) > 0)
			out[strcspn(out, "\n")] = 0;
		return;
	}
	for (long k = 0; k < got && len < n; k++) {
		uint64_t i = ids[k] - 100;

		if (ids[k] >= 100 && i < sizeof(names) / sizeof(names[0]))
			len += snprintf(out + len, n - len, "%s%s", len ? ", " : "", names[i]);
	}
}

/* The owner (real uid) of a process, or -1 when its status cannot be read. */
static long proc_uid(uint32_t pid)
{
	char path[64], text[2048];
	const char *p;

	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	if (proc_read_file(path, text, sizeof(text)) <= 0 || !(p = strstr(text, "\nUid:")))
		return -1;
	return strtol(p + 5, NULL, 10);
}

/*
 * Why reading /proc/PID/maps was refused, as the rest of a sentence. The kernel allows it to a
 * process of the same user when the target is dumpable, and to one with CAP_SYS_PTRACE (or,
 * since Linux 6.11, CAP_PERFMON, which the tracer has) in the target's user namespace; a
 * security module may refuse either.
 */
static void maps_denied_why(uint64_t caps, uint32_t pid, char *out, size_t n)
{
	long uid = proc_uid(pid);
	char lsms[512];

	if (!privs_has(caps, CAP_SYS_PTRACE)) {
		snprintf(out, n,
			 "%s needs CAP_SYS_PTRACE before Linux 6.11 (CAP_PERFMON since), or a "
			 "security module refused it",
			 uid >= 0 && (uid_t)uid == geteuid()
			     ? "reading a non-dumpable process's libraries (one that changed its "
			       "credentials, or called prctl(PR_SET_DUMPABLE, 0))"
			     : "reading another user's process's libraries");
		return;
	}
	if (in_user_ns()) {
		snprintf(out, n,
			 "this process has CAP_SYS_PTRACE, but in a user namespace of its own, "
			 "which does not reach a process outside it (run tokenscope in the host's "
			 "user namespace)");
		return;
	}
	active_lsms(lsms, sizeof(lsms));
	snprintf(out, n,
		 "not for want of a capability: this process has CAP_SYS_PTRACE in the host's "
		 "user namespace, so a security module or the kernel's own policy refused it "
		 "(security modules active here: %s; Yama, which checks attaching only, is not "
		 "the cause)",
		 lsms[0] ? lsms : "not known");
}

/* Loading maps and BTF takes CAP_BPF, and tracing programs CAP_PERFMON as well;
 * CAP_SYS_ADMIN stands for either. */
void privs_explain_load(int err)
{
	bool seccomp;
	uint64_t caps = privs_caps(&seccomp);
	bool bpf = privs_has(caps, CAP_BPF) || privs_has(caps, CAP_SYS_ADMIN);
	bool perfmon = privs_has(caps, CAP_PERFMON) || privs_has(caps, CAP_SYS_ADMIN);

	if (!bpf || !perfmon)
		fprintf(stderr,
			"tokenscope: not allowed to load BPF programs (%s): needs %s (or root)\n",
			strerror(-err),
			!bpf && !perfmon ? "CAP_BPF and CAP_PERFMON"
			: !bpf		 ? "CAP_BPF as well as CAP_PERFMON"
					 : "CAP_PERFMON as well as CAP_BPF");
	else
		fprintf(stderr,
			"tokenscope: not allowed to load BPF programs (%s), although this process "
			"has CAP_BPF and CAP_PERFMON: %s\n",
			strerror(-err),
			in_user_ns() ? "they are a user namespace's, which do not count for BPF"
			: seccomp    ? "a seccomp filter may deny bpf() (a container runtime's "
				       "default profile without CAP_SYS_ADMIN)"
				     : "kernel lockdown or a security module may forbid it");
}

/* Uprobes need CAP_SYS_ADMIN (Linux 6.16 and later), and another process's libraries, reached
 * through /proc/PID/root, CAP_SYS_PTRACE. */
void privs_explain_hook(uint64_t caps, const struct uprobes_denial *d)
{
	bool admin = privs_has(caps, CAP_SYS_ADMIN), ptrace = privs_has(caps, CAP_SYS_PTRACE);
	const char *why;

	if (d->what == UPROBES_DENIED_MAPS) {
		char why_maps[1024];

		maps_denied_why(caps, d->pid, why_maps, sizeof(why_maps));
		fprintf(stderr,
			"tokenscope: cannot read %s (%s): %s; GPU steps and TLS plaintext are not "
			"traced\n",
			d->path, strerror(d->err), why_maps);
		return;
	}
	if (d->what == UPROBES_DENIED_ROOT)
		why = ptrace ? "opening it through /proc/PID/root was refused"
			     : "opening it through /proc/PID/root needs CAP_SYS_PTRACE";
	else
		why = admin ? "attaching uprobes was refused"
			    : "uprobes need CAP_SYS_ADMIN (Linux 6.16 and later)";
	fprintf(stderr,
		"tokenscope: cannot hook the %s library %s of pid %u: %s (%s); %s not traced\n",
		d->kind, d->path, d->pid, why, strerror(d->err), d->traces);
}
