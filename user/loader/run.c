// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loader/run.h"

/* The signals tokenscope passes on to the command. */
static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

static volatile pid_t child;
static volatile sig_atomic_t *child_exited;

static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (sig == SIGCHLD) {
		/* Every record the command made is in the ring buffer before its parent hears of
		 * its exit: the trace ends with the last drain. Another child's end (an
		 * --alert-exec command, the hold watchdog) is not the command's. */
		if (si->si_pid == child)
			*child_exited = 1;
		return;
	}
	/* A signal sent by a process (kill, a supervisor) is passed on. One the terminal
	 * generated (Ctrl-C, SI_KERNEL) went to the command's process group as well: passing it
	 * on would deliver it twice. */
	if (si->si_code <= 0 && child > 0)
		kill(child, sig);
}

int run_find_devtime_lib(const struct vendor_devtime *d, char *buf, size_t len)
{
	/* Beside the binary (the build tree), then where make install puts it. */
	static const char *const dirs[] = { "", "/../lib/tokenscope" };
	const char *env = getenv(d->path_env);
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return access(buf, R_OK) ? -ENOENT : 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(buf, len, "%s", d->file_name);
		return -ENOENT;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if ((size_t)snprintf(buf, len, "%s%s/%s", slash ? exe : ".", dirs[i],
				     d->file_name) >= len)
			return -ENAMETOOLONG;
		if (!access(buf, R_OK)) {
			char *real = realpath(buf, NULL); /* without the "/.." */

			if (real && strlen(real) < len)
				strcpy(buf, real);
			free(real);
			return 0;
		}
	}
	/* Not found: the first place is the one a message names. */
	snprintf(buf, len, "%s/%s", slash ? exe : ".", d->file_name);
	return -ENOENT;
}

/* Whether execvp would find cmd: 0, or the errno it would fail with (ENOENT; EACCES for a
 * file found that may not be run). The exec itself still says the last word. */
static int command_findable(const char *cmd)
{
	const char *path = getenv("PATH"), *p;
	char full[PATH_MAX];
	struct stat st;
	int err = ENOENT;

	if (!*cmd)
		return ENOENT;
	if (strchr(cmd, '/'))
		return stat(cmd, &st)				   ? errno
		       : access(cmd, X_OK) || !S_ISREG(st.st_mode) ? EACCES
								   : 0;
	if (!path)
		path = "/bin:/usr/bin"; /* execvp's default */
	for (p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int len = (int)(end - p);

		/* An empty entry is the current directory. */
		if ((size_t)snprintf(full, sizeof(full), "%.*s%s%s", len, p, len ? "/" : "", cmd) <
			sizeof(full) &&
		    !stat(full, &st)) {
			if (S_ISREG(st.st_mode) && !access(full, X_OK))
				return 0;
			err = EACCES;
		}
		if (!*end)
			break;
		p = end;
	}
	return err;
}

struct run_ctx {
	pid_t pid;
	int go_fd;     /* a byte written here lets the child exec */
	int err_fd;    /* the child's exec errno, or end of file once exec succeeded */
	int exec_err;  /* why exec failed, 0 if it did not */
	bool released; /* the child was told to exec */
	const char *cmd;
};

/* Called by trace_run once the child is followed and every program is attached. */
static int release_child(void *p)
{
	struct run_ctx *c = p;
	struct sigaction ign = { .sa_handler = SIG_IGN }, old;
	char go = 1;
	int e = 0;
	ssize_t n;

	c->released = true;
	/* A signal passed on before the command started (SIGTERM while tokenscope was setting
	 * up) ended the child already: the pipe has no reader, and the trace ends with its exit
	 * status, not with tokenscope killed by SIGPIPE. */
	sigaction(SIGPIPE, &ign, &old);
	n = write(c->go_fd, &go, 1);
	e = errno;
	sigaction(SIGPIPE, &old, NULL);
	if (n != 1 && e != EPIPE) {
		fprintf(stderr, "tokenscope: cannot start %s: %s\n", c->cmd, strerror(e));
		return -e;
	}
	close(c->go_fd);
	c->go_fd = -1;
	if (n != 1)
		return 0;
	/* The pipe is close-on-exec in the child: end of file means exec succeeded. */
	do
		n = read(c->err_fd, &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	if (n == sizeof(e)) {
		c->exec_err = e ? e : EINVAL;
		fprintf(stderr, "tokenscope: cannot run %s: %s\n", c->cmd, strerror(c->exec_err));
		return -c->exec_err;
	}
	return 0;
}

/* In the child: waits to be released, then becomes the command, given each device-time library
 * of inject (a path per GPU vendor, NULL for none) in the variable its vendor's runtime reads.
 * Never returns. */
static void child_main(char *const argv[], int go_fd, int err_fd, const char *const inject[])
{
	char go;
	int e;

	if (read(go_fd, &go, 1) != 1)
		_exit(127); /* tokenscope could not attach, and said why */
	close(go_fd);
	for (size_t i = 0; i < vendor_count(); i++) {
		const char *env = vendor_row(i)->devtime.inject_env;

		if (inject[i] && !getenv(env))
			setenv(env, inject[i], 1);
	}
	execvp(argv[0], argv);
	e = errno;
	if (write(err_fd, &e, sizeof(e)) != sizeof(e))
		_exit(127);
	_exit(127);
}

static int exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* Each GPU vendor's device-time library, into inject (a path in libs, or NULL) unless its
 * variable is set already; one not found is said in the vendor's note of o, only if the command
 * maps one of the vendor's libraries: elsewhere it means nothing. */
static void devtime_libs(struct trace_opts *o, char libs[][PATH_MAX], const char *inject[])
{
	for (size_t i = 0; i < vendor_count(); i++) {
		const struct vendor_devtime *d = &vendor_row(i)->devtime;
		const char *set;

		inject[i] = NULL;
		if (!d->file_name)
			continue;
		set = getenv(d->inject_env);
		if (set && *set) {
			if (o->verbose)
				fprintf(stderr,
					"tokenscope: %s is already set (%s): left as it is\n",
					d->inject_env, set);
		} else if (run_find_devtime_lib(d, libs[i], PATH_MAX) == 0) {
			inject[i] = libs[i];
		} else {
			snprintf(o->gpu_note[i], sizeof(o->gpu_note[i]),
				 "no %s at %.300s (set %s to its path): GPU steps without device "
				 "times",
				 d->file_name, libs[i], d->path_env);
		}
	}
}

int run_command(struct trace_opts *o, struct pipeline *pl, const struct trace_hooks *h,
		char *const argv[], volatile sig_atomic_t *exiting)
{
	struct sigaction sa = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO };
	struct run_ctx c = { .go_fd = -1, .err_fd = -1, .cmd = argv[0] };
	char libs[VENDORS_MAX][PATH_MAX];
	const char *inject[VENDORS_MAX];
	int go[2], err[2], status = 0, rc;

	devtime_libs(o, libs, inject);
	/* A command that cannot start is said before anything is attached. */
	rc = command_findable(argv[0]);
	if (rc) {
		fprintf(stderr, "tokenscope: cannot run %s: %s\n", argv[0], strerror(rc));
		return rc == EACCES ? 126 : 127;
	}
	if (pipe2(go, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
		fprintf(stderr, "tokenscope: cannot start %s: %s\n", argv[0], strerror(errno));
		return 1;
	}
	fflush(NULL);
	c.pid = fork();
	if (c.pid < 0) {
		fprintf(stderr, "tokenscope: cannot start %s: %s\n", argv[0], strerror(errno));
		return 1;
	}
	if (c.pid == 0) {
		close(go[1]);
		close(err[0]);
		child_main(argv, go[0], err[1], inject);
	}
	close(go[0]);
	close(err[1]);
	c.go_fd = go[1];
	c.err_fd = err[0];

	child = c.pid;
	child_exited = exiting;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaction(forwarded[i], &sa, NULL);
	sa.sa_flags |= SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);

	o->pids[0] = (uint32_t)c.pid;
	o->npids = 1;
	o->run_name = base_name(argv[0]);
	o->attached = release_child;
	o->attached_ctx = &c;
	rc = trace_run(o, pl, h, exiting);
	if (c.go_fd >= 0)
		close(c.go_fd);
	close(c.err_fd);
	if (!c.released) {
		/* Tracing failed before the command started: it never will. */
		kill(c.pid, SIGKILL);
		waitpid(c.pid, NULL, 0);
		return 1;
	}
	if (c.exec_err) {
		waitpid(c.pid, NULL, 0);
		return c.exec_err == EACCES || c.exec_err == ENOEXEC ? 126 : 127;
	}
	if (waitpid(c.pid, &status, WNOHANG) == 0) {
		/* -d or a failure ended the trace first: the command is the user's work. */
		fprintf(stderr, "tokenscope: tracing %s; waiting for %s (PID %d) to exit\n",
			rc ? "failed" : "ended", o->run_name, (int)c.pid);
		while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	child = 0;
	return exit_status(status);
}
