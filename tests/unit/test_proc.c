// SPDX-License-Identifier: MIT
/* user/loader/proc.c: the /proc files a traced process controls (its comm, its mapped files'
 * names), parsed strictly. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loader/proc.h"

TEST(test_stat)
{
	uint32_t pid = 0, ppid = 0;

	ASSERT_OK(proc_parse_stat("4242 (python3) S 77 4242 1 0 -1", &pid, &ppid), "plain");
	ASSERT_EQ(pid, 4242, "pid");
	ASSERT_EQ(ppid, 77, "ppid");
	/* A comm that imitates the rest of the line: the state follows the last ')'. */
	ASSERT_OK(proc_parse_stat("9 (a) R 1 (b) S 5 1 1", &pid, &ppid), "comm with ') R 1 ('");
	ASSERT_EQ(ppid, 5, "ppid after the last ')'");
	ASSERT_OK(proc_parse_stat("9 (\n\x1b[2J) S 3\n", &pid, &ppid), "control bytes in comm");
	ASSERT_EQ(ppid, 3, "ppid");
	ASSERT_EQ(proc_parse_stat("-9 (a) S 1", &pid, &ppid), -EINVAL, "negative pid");
	ASSERT_EQ(proc_parse_stat("9 (a) S -1", &pid, &ppid), -EINVAL, "negative ppid");
	ASSERT_EQ(proc_parse_stat("4294967305 (a) S 1", &pid, &ppid), -EINVAL, "pid past 32 bits");
	ASSERT_EQ(proc_parse_stat("4194305 (a) S 1", &pid, &ppid), -EINVAL, "past PID_MAX_LIMIT");
	ASSERT_EQ(proc_parse_stat("9 a) S 1", &pid, &ppid), -EINVAL, "no '('");
	ASSERT_EQ(proc_parse_stat("9 (a S 1", &pid, &ppid), -EINVAL, "no ')'");
	ASSERT_EQ(proc_parse_stat("9 (a) S", &pid, &ppid), -EINVAL, "no ppid");
	ASSERT_EQ(proc_parse_stat("", &pid, &ppid), -EINVAL, "empty");
}

TEST(test_maps)
{
	struct proc_map m;

	ASSERT_OK(proc_maps_parse("7f1c2a000000-7f1c2a200000 r-xp 00028000 08:01 1311 "
				  "          /usr/lib/x86_64-linux-gnu/libc.so.6\n",
				  &m),
		  "library");
	ASSERT_TRUE(m.exec, "executable");
	ASSERT_EQ(m.start, 0x7f1c2a000000ull, "start");
	ASSERT_EQ(m.offset, 0x28000, "offset");
	ASSERT_EQ(m.inode, 1311, "inode");
	ASSERT_STREQ(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6", "path");
	/* Spaces belong to the path (a sscanf %s took its first word only). */
	ASSERT_OK(proc_maps_parse("1000-2000 r-xp 0 00:1f 7 /opt/my libs/libcudart.so.13\n", &m),
		  "a path with a space");
	ASSERT_STREQ(m.path, "/opt/my libs/libcudart.so.13", "whole path");
	ASSERT_OK(proc_maps_parse("1000-2000 r-xp 0 00:1f 7 /tmp/libx.so (deleted)\n", &m),
		  "deleted");
	ASSERT_STREQ(m.path, "/tmp/libx.so (deleted)", "the kernel's mark kept: not opened");
	ASSERT_OK(proc_maps_parse("1000-2000 rw-p 0 00:00 0\n", &m), "anonymous");
	ASSERT_FALSE(m.exec, "not executable");
	ASSERT_STREQ(m.path, "", "no path");
	/* A file named with an escape sequence: opened by its bytes, shown as text. */
	ASSERT_OK(proc_maps_parse("1000-2000 r-xp 0 00:1f 7 /tmp/\x1b]0;x\x07lib.so\n", &m),
		  "escape in a name");
	ASSERT_STREQ(m.path, "/tmp/\x1b]0;x\x07lib.so", "bytes kept for open()");
	ASSERT_STREQ(m.shown, "/tmp/\xef\xbf\xbd]0;x\xef\xbf\xbdlib.so", "shown printable");
	ASSERT_EQ(proc_maps_parse("1000-2000 r-xp", &m), -EINVAL, "cut");
	ASSERT_EQ(proc_maps_parse("10000000000000000-2 r-xp 0 0:0 0 /x\n", &m), -EINVAL,
		  "start past 64 bits");
	ASSERT_EQ(proc_maps_parse("zz-2 r-xp 0 0:0 0 /x\n", &m), -EINVAL, "not hex");
	ASSERT_EQ(proc_maps_parse("", &m), -EINVAL, "empty");
}

static void put(const char *root, uint32_t pid, const char *stat)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%u", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%u/stat", root, pid);
	f = fopen(path, "w");
	fputs(stat, f);
	fclose(f);
}

static void count(void *ctx, uint32_t pid)
{
	(void)pid;
	(*(int *)ctx)++;
}

/* A tree with a stat file that lies (a pid cycle) and ones that are not stat files. */
TEST(test_descendants)
{
	char root[] = "/tmp/ts-proc-XXXXXX", cmd[64];
	int n = 0;

	if (!ASSERT_OK_PTR(mkdtemp(root), "temp dir"))
		return;
	put(root, 10, "10 (server) S 1");
	put(root, 11, "11 (engine) S 10");
	put(root, 12, "12 (worker) S 11");
	put(root, 13, "13 (x) S 14");
	put(root, 14, "14 (y) S 13");
	put(root, 15, "15 (z) S -10");
	put(root, 16, "garbage");
	ASSERT_EQ(proc_descendants(root, 10, count, &n), 2, "engine and worker");
	ASSERT_EQ(n, 2, "called for each");
	n = 0;
	ASSERT_EQ(proc_descendants(root, 13, count, &n), 1, "a cycle ends");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ASSERT_OK(system(cmd), "clean up");
}

/* Live processes by comm: a zombie is not one, nor a comm that only starts the same. */
TEST(test_find_live)
{
	char root[] = "/tmp/ts-proc-XXXXXX", cmd[64];

	if (!ASSERT_OK_PTR(mkdtemp(root), "temp dir"))
		return;
	ASSERT_EQ(proc_find_live(root, "tokenscope-exit"), 0, "none");
	put(root, 20, "20 (tokenscope-exit) Z 1");
	put(root, 21, "21 (tokenscope-exi) S 1");
	put(root, 22, "22 (a) (tokenscope-exit) S 1");
	ASSERT_EQ(proc_find_live(root, "tokenscope-exit"), 0, "a zombie and other names");
	put(root, 23, "23 (tokenscope-exit) D 1");
	ASSERT_EQ(proc_find_live(root, "tokenscope-exit"), 23, "one removing probes");
	ASSERT_EQ(proc_find_live(root, "a) (tokenscope-exit"), 22, "a comm with parentheses");
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ASSERT_OK(system(cmd), "clean up");
}

int main(void)
{
	return check_run_all();
}
