// SPDX-License-Identifier: MIT
/*
 * The init of tests/arm64/run_vm.sh's arm64 machine, which has nothing else: mounts what the
 * BPF tests use, brings up the loopback interface (their sockets are loopback TCP), runs each
 * program the kernel command line names after "--" and powers off, so the emulator exits.
 */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void mnt(const char *src, const char *dir, const char *type)
{
	mkdir(dir, 0755);
	if (mount(src, dir, type, 0, NULL) && errno != EBUSY)
		fprintf(stderr, "vminit: mount %s: %s\n", dir, strerror(errno));
}

static void lo_up(void)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM, 0);

	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) ||
	    (ifr.ifr_flags |= IFF_UP, ioctl(s, SIOCSIFFLAGS, &ifr)))
		fprintf(stderr, "vminit: lo up: %s\n", strerror(errno));
	if (s >= 0)
		close(s);
}

int main(int argc, char **argv)
{
	mnt("proc", "/proc", "proc");
	mnt("sysfs", "/sys", "sysfs");
	mnt("tracefs", "/sys/kernel/tracing", "tracefs");
	mnt("debugfs", "/sys/kernel/debug", "debugfs");
	mnt("bpf", "/sys/fs/bpf", "bpf");
	mnt("tmpfs", "/tmp", "tmpfs");
	lo_up();
	if (chdir("/work"))
		fprintf(stderr, "vminit: /work: %s\n", strerror(errno));
	for (int i = 1; i < argc; i++) {
		int st = 0;
		pid_t pid;

		if (argv[i][0] != '/')
			continue;
		printf("vminit: running %s\n", argv[i]);
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			execl(argv[i], argv[i], (char *)NULL);
			fprintf(stderr, "vminit: %s: %s\n", argv[i], strerror(errno));
			_exit(127);
		}
		waitpid(pid, &st, 0);
		printf("vminit: %s exited %d\n", argv[i],
		       WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		fflush(stdout);
	}
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
