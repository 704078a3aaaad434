// SPDX-License-Identifier: MIT
/*
 * CUDA uprobes on the real CUDA runtime (the toolkit's libcudart: with no GPU every call returns
 * an error, but the function is entered) or, where no toolkit is installed, on the stand-in
 * library with the same symbols. This process loads it, the loader's own code finds and hooks it
 * through /proc/self/maps, and the test issues steps of known shape and checks the step records;
 * and the probes are a hooked process's alone (another process mapping the file never traps).
 */
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <linux/types.h>
#include <stdlib.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "check.h"
#include "loader/uprobes.h"
#include "events.h"
#include "pipeline/gpu.h"
#include "loader/kernel.h"
#include "loader/tracefs.h"
#include "tokenscope.skel.h"

#define MAX_STEPS 64

typedef int (*launch_fn)(const void *, unsigned long long, unsigned long long, void **, size_t,
			 void *);
typedef int (*graph_fn)(void *, void *);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*sync_fn)(void *);
typedef int (*devsync_fn)(void);

struct cudart {
	void *h;
	const char *path;
	launch_fn launch;
	graph_fn graph;
	memcpy_async_fn memcpy_async;
	sync_fn stream_sync;
	devsync_fn device_sync;
};

static struct ts_gpu_step_event steps[MAX_STEPS];
static int nsteps, ncalls, ndtoh;

static int collect(void *ctx, void *data, size_t len)
{
	const struct ts_event_hdr *h = data;

	(void)ctx;
	if (h->type == TS_EV_GPU_STEP && len == sizeof(steps[0]) && nsteps < MAX_STEPS)
		memcpy(&steps[nsteps++], data, len);
	if (h->type == TS_EV_GPU_CALL && len == sizeof(struct ts_gpu_call_event)) {
		const struct ts_gpu_call_event *e = data;

		ncalls++;
		ndtoh += e->fn == TS_CUDA_MEMCPY && e->kind == 2;
	}
	return 0;
}

static bool cudart_open(struct cudart *c, const char *path)
{
	c->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!c->h)
		return false;
	c->path = path;
	c->launch = (launch_fn)dlsym(c->h, "cudaLaunchKernel");
	c->graph = (graph_fn)dlsym(c->h, "cudaGraphLaunch");
	c->memcpy_async = (memcpy_async_fn)dlsym(c->h, "cudaMemcpyAsync");
	c->stream_sync = (sync_fn)dlsym(c->h, "cudaStreamSynchronize");
	c->device_sync = (devsync_fn)dlsym(c->h, "cudaDeviceSynchronize");
	return c->launch && c->graph && c->memcpy_async && c->stream_sync && c->device_sync;
}

static void cuda_steps(const char *path, bool calls)
{
	struct tokenscope_bpf *skel = NULL;
	struct kernel *k = NULL;
	struct ring_buffer *rb = NULL;
	struct uprobes ca;
	struct cudart c = { 0 };
	uint32_t me = getpid();
	char buf[8];
	int hooked;

	nsteps = ncalls = ndtoh = 0;
	if (!cudart_open(&c, path)) {
		SKIP("not installed");
		return;
	}
	printf("  using %s\n", c.path);
	LIBBPF_QUIET(); /* symbols absent from the executable are expected */
	skel = kernel_skel_open();
	if (!ASSERT_OK_PTR(skel, "open"))
		goto out;
	skel->rodata->emit_gpu_calls = calls;
	if (!ASSERT_OK(tokenscope_bpf__load(skel), "load"))
		goto out;
	if (!ASSERT_OK(tokenscope_bpf__attach(skel), "attach"))
		goto out;
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), collect, NULL, NULL);
	if (!ASSERT_OK_PTR(rb, "ring buffer") || !ASSERT_OK(kernel_borrow(&k, skel), "kernel side"))
		goto out;
	uprobes_init(&ca, k, false);
	hooked = uprobes_scan(&ca, me, false);
	ASSERT_TRUE(hooked >= 5, "launch, graph launch, copy and syncs hooked");
	ASSERT_EQ(uprobes_scan(&ca, me, false), 0, "a second scan hooks nothing again");

	/* Untraced: nothing is counted. */
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	c.stream_sync(NULL);
	ring_buffer__consume(rb);
	ASSERT_EQ(nsteps, 0, "untraced process: no step");

	kernel_set_traced(skel, me, true);
	/* A prefill-shaped step: 40 eager launches, then a wait. */
	for (int i = 0; i < 40; i++)
		c.launch(NULL, 0, 0, NULL, 0, NULL);
	usleep(20000);
	c.stream_sync(NULL);
	/* A wait with no work: merged into the next step. */
	c.device_sync();
	/* A decode-shaped step: a graph replay, a device-to-host copy of the token, a wait. */
	c.graph(NULL, NULL);
	usleep(10000);
	c.memcpy_async(buf, buf, 4, 2, NULL);
	c.stream_sync(NULL);
	ring_buffer__consume(rb);

	if (!ASSERT_EQ(nsteps, 2, "two steps"))
		goto out;
	ASSERT_EQ(steps[0].launches, 40, "prefill launches counted in the kernel");
	ASSERT_EQ(steps[0].graph_launches, 0, "no graph in prefill");
	ASSERT_EQ(gpu_classify(steps[0].launches, steps[0].graph_launches), STEP_PREFILL,
		  "classified prefill");
	ASSERT_TRUE(steps[0].end_ns - steps[0].start_ns >= 20000000, "prefill lasted >= 20 ms");
	ASSERT_TRUE(steps[0].wait_start_ns >= steps[0].start_ns + 20000000, "wait after the work");
	ASSERT_EQ(steps[1].launches, 0, "decode: no eager launch");
	ASSERT_EQ(steps[1].graph_launches, 1, "decode: one graph");
	ASSERT_EQ(steps[1].memcpys, 1, "one copy");
	ASSERT_EQ(steps[1].memcpys_dtoh, 1, "device to host");
	ASSERT_EQ(steps[1].waits, 2, "the empty wait merged in");
	ASSERT_EQ(gpu_classify(steps[1].launches, steps[1].graph_launches), STEP_DECODE,
		  "classified decode");
	ASSERT_TRUE(steps[1].start_ns >= steps[0].end_ns, "steps in order");
	ASSERT_TRUE(steps[1].end_ns - steps[1].start_ns >= 10000000, "decode lasted >= 10 ms");
	ASSERT_EQ(steps[1].hdr.pid, me, "pid");
	/* Per-call records only when asked for: 40 launches, a graph launch and a copy. */
	ASSERT_EQ(ncalls, calls ? 42 : 0, "per-call records");
	ASSERT_EQ(ndtoh, calls ? 1 : 0, "the copy's direction");
	uprobes_detach(&ca, NULL, NULL);
out:
	ring_buffer__free(rb);
	kernel_destroy(k);
	tokenscope_bpf__destroy(skel);
	if (c.h)
		dlclose(c.h);
}

/* How many times a program ran, with the kernel's run statistics on (-1: cannot tell). */
static long long prog_runs(const struct bpf_program *p)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	if (bpf_obj_get_info_by_fd(bpf_program__fd(p), &info, &len))
		return -1;
	return (long long)info.run_cnt;
}

/* Runs of the CUDA call programs: the one of every kind where the kernel has cookies, else the
 * program of each kind (features.h); the ones not loaded count none. */
static long long call_runs(struct tokenscope_bpf *skel)
{
	const struct bpf_program *progs[] = {
		skel->progs.ts_cuda_call,	skel->progs.ts_cuda_call_launch,
		skel->progs.ts_cuda_call_graph, skel->progs.ts_cuda_call_memcpy,
		skel->progs.ts_cuda_call_dtoh,
	};
	long long n = 0;

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		long long r = bpf_program__fd(progs[i]) >= 0 ? prog_runs(progs[i]) : 0;

		if (r < 0)
			return -1;
		n += r;
	}
	return n;
}

/*
 * The probes are a traced process's alone: another process that maps the same library (here
 * this test, with a child hooked) never traps, the child's calls run the program, and once the
 * child is forgotten nothing of it is left to run.
 */
TEST(test_probes_per_process)
{
	const char *path = "/usr/local/cuda/lib64/libcudart.so.13";
	struct tokenscope_bpf *skel = NULL;
	struct kernel *k = NULL;
	int go[2] = { -1, -1 }, stats_fd = -1, status;
	struct uprobes ca;
	struct cudart c = { 0 };
	long long before;
	pid_t child = -1;
	char b = 0;

	if (!cudart_open(&c, path) && !cudart_open(&c, ".output/standin/libcudart.so.13")) {
		SKIP("no runtime");
		return;
	}
	LIBBPF_QUIET();
	skel = kernel_skel_open_and_load();
	if (!ASSERT_OK_PTR(skel, "load") || !ASSERT_OK(pipe(go), "pipe"))
		goto out;
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats_fd < 0) {
		SKIP("the kernel's BPF run statistics cannot be turned on");
		goto out;
	}
	child = fork();
	if (child == 0) {
		/* Waits for the word, then makes 10 launches of its own. */
		if (read(go[0], &b, 1) == 1)
			for (int i = 0; i < 10; i++)
				c.launch(NULL, 0, 0, NULL, 0, NULL);
		_exit(0);
	}
	if (!ASSERT_TRUE(child > 0, "fork") || !ASSERT_OK(kernel_borrow(&k, skel), "kernel side"))
		goto out;
	uprobes_init(&ca, k, false);
	ASSERT_TRUE(uprobes_scan(&ca, child, false) >= 5, "hooked for the child");
	before = call_runs(skel);
	for (int i = 0; i < 10; i++)
		c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before, "this process maps the same file and never traps");
	ASSERT_EQ(write(go[1], "g", 1), 1, "go");
	waitpid(child, &status, 0);
	child = -1;
	ASSERT_EQ(call_runs(skel), before + 10, "the child's 10 launches");
	uprobes_forget(&ca, getpid() + 1000000); /* no such process: nothing changes */
	ASSERT_EQ(ca.nhooks, 1, "one hook");
	ASSERT_TRUE(uprobes_scan(&ca, getpid(), false) >= 5, "hooked for this process too");
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before + 11, "now this process traps");
	uprobes_forget(&ca, getpid());
	ASSERT_EQ(ca.nhooks, 1, "its hook is gone");
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before + 11, "and its probes with it");
	ASSERT_EQ(uprobes_hooked_files(&ca, "CUDA"), 1, "one file hooked");
	uprobes_detach(&ca, NULL, NULL);
out:
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	if (stats_fd >= 0)
		close(stats_fd);
	if (go[0] >= 0) {
		close(go[0]);
		close(go[1]);
	}
	kernel_destroy(k);
	tokenscope_bpf__destroy(skel);
	if (c.h)
		dlclose(c.h);
}

/* n launches in a child forked now, which forks a grandchild for m more; waits for both. */
static void launches_in_children(struct cudart *c, int n, int m)
{
	pid_t p = fork(), g;
	int status;

	if (p == 0) {
		for (int i = 0; i < n; i++)
			c->launch(NULL, 0, 0, NULL, 0, NULL);
		g = fork();
		if (g == 0) {
			for (int i = 0; i < m; i++)
				c->launch(NULL, 0, 0, NULL, 0, NULL);
			_exit(0);
		}
		waitpid(g, &status, 0);
		_exit(0);
	}
	waitpid(p, &status, 0);
}

/*
 * Shared probes (tracefs): a child forked after its parent was hooked runs the programs from
 * its first call, with nothing done for it, and so does its own child; a process forked
 * before stays untouched; a child's exit leaves its parent's probes in place (an inherited
 * event that carried the program would take it off the probe for everyone).
 */
TEST(test_probes_inherited_at_fork)
{
	const char *path = "/usr/local/cuda/lib64/libcudart.so.13";
	struct tokenscope_bpf *skel = NULL;
	struct kernel *k = NULL;
	int go[2] = { -1, -1 }, stats_fd = -1, status, err;
	struct uprobes ca;
	struct cudart c = { 0 };
	long long before;
	pid_t early = -1;
	char b = 0;

	if (!cudart_open(&c, path) && !cudart_open(&c, ".output/standin/libcudart.so.13")) {
		SKIP("no runtime");
		return;
	}
	err = tracefs_init();
	if (err) {
		SKIP("tracefs is not usable here");
		return;
	}
	LIBBPF_QUIET();
	skel = kernel_skel_open_and_load();
	if (!ASSERT_OK_PTR(skel, "load") || !ASSERT_OK(pipe(go), "pipe"))
		goto out;
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats_fd < 0) {
		SKIP("the kernel's BPF run statistics cannot be turned on");
		goto out;
	}
	early = fork();
	if (early == 0) {
		/* Forked before the hook: its 10 launches must not run the program. */
		if (read(go[0], &b, 1) == 1)
			for (int i = 0; i < 10; i++)
				c.launch(NULL, 0, 0, NULL, 0, NULL);
		_exit(0);
	}
	if (!ASSERT_TRUE(early > 0, "fork") || !ASSERT_OK(kernel_borrow(&k, skel), "kernel side"))
		goto out;
	uprobes_init(&ca, k, false);
	ASSERT_TRUE(ca.shared, "probes shared through tracefs");
	ASSERT_TRUE(uprobes_scan(&ca, getpid(), false) >= 5, "hooked for this process");
	before = call_runs(skel);
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before + 1, "this process traps");
	launches_in_children(&c, 7, 5);
	ASSERT_EQ(call_runs(skel), before + 13,
		  "a child forked after the hook (7) and its child (5), never scanned");
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before + 14, "the children exited: this process still traps");
	/* A child forked by the main thread is remembered as carrying the probes: the scan that
	 * gives it its own does not count them late. */
	{
		int hold[2] = { -1, -1 };
		pid_t kid = -1;

		if (!ASSERT_OK(pipe(hold), "pipe") || !ASSERT_TRUE((kid = fork()) >= 0, "fork"))
			goto out;
		if (kid == 0) {
			char x;

			close(hold[1]);
			if (read(hold[0], &x, 1) < 0)
				_exit(1);
			_exit(0);
		}
		close(hold[0]);
		uprobes_fork(&ca, (uint32_t)getpid(), (uint32_t)getpid(), (uint32_t)kid);
		ASSERT_TRUE(uprobes_scan(&ca, (uint32_t)kid, true) >= 5, "its own probes");
		ASSERT_EQ(ca.late_hooks, 0, "not late: it carried its parent's");
		close(hold[1]);
		waitpid(kid, &status, 0);
		uprobes_forget(&ca, (uint32_t)kid);
	}
	ASSERT_EQ(write(go[1], "g", 1), 1, "go");
	waitpid(early, &status, 0);
	early = -1;
	ASSERT_EQ(call_runs(skel), before + 14, "a process forked before the hook never traps");
	/* (This process also holds the programs' carrier events, which admit it: tokenscope
	 * itself is never traced, so there they are inert; here only detaching ends them.) */
	uprobes_detach(&ca, NULL, NULL);
	c.launch(NULL, 0, 0, NULL, 0, NULL);
	ASSERT_EQ(call_runs(skel), before + 14, "detached: no more traps");
out:
	if (early > 0) {
		kill(early, SIGKILL);
		waitpid(early, &status, 0);
	}
	if (stats_fd >= 0)
		close(stats_fd);
	tracefs_cleanup();
	kernel_destroy(k);
	tokenscope_bpf__destroy(skel);
	if (c.h)
		dlclose(c.h);
}

/* The toolkit's real runtime: no GPU here, so calls fail, but they are entered. */
TEST(test_cuda_runtime)
{
	cuda_steps("/usr/local/cuda/lib64/libcudart.so.13", false);
}

/* --kernels: a record per launch and copy as well. */
TEST(test_cuda_runtime_calls)
{
	cuda_steps("/usr/local/cuda/lib64/libcudart.so.13", true);
}

/* The stand-in with the same symbols, for machines without the toolkit. */
TEST(test_standin_runtime)
{
	cuda_steps(".output/standin/libcudart.so.13", false);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP bpf CUDA tests: need root\n");
		return 0;
	}
	return check_run_all();
}
