// SPDX-License-Identifier: MIT
/* Discovery of inference servers on a fake /proc tree built under /tmp. */
#include <errno.h>
#include <ftw.h>
#include <linux/types.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loader/discover.h"
#include "traffic.h"

#define HEX_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HEX_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define HEX_C "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999"
#define HEX_D "d00dfeed00000000111111112222222233333333444444445555555566666666"

static char root[64];

static void put(const char *dir, const char *file, const char *data, size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "w");
	if (!f)
		return;
	fwrite(data, 1, len, f);
	fclose(f);
}

/* A process: args is NULL-terminated, written NUL-separated as the kernel does. */
static void proc(uint32_t pid, uint32_t ppid, const char *comm, const char *cgroup,
		 const char *const *args)
{
	char dir[128], buf[1024], line[256];
	size_t len = 0;

	snprintf(dir, sizeof(dir), "%s/%u", root, pid);
	mkdir(dir, 0755);
	snprintf(line, sizeof(line), "%u (%s) S %u 1 1 0 -1 4194560\n", pid, comm, ppid);
	put(dir, "stat", line, strlen(line));
	snprintf(line, sizeof(line), "%s\n", comm);
	put(dir, "comm", line, strlen(line));
	for (int i = 0; args[i]; i++) {
		size_t n = strlen(args[i]) + 1;

		memcpy(buf + len, args[i], n);
		len += n;
	}
	put(dir, "cmdline", buf, len);
	put(dir, "cgroup", cgroup, strlen(cgroup));
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static const char *const no_container = "0::/user.slice/user-1000.slice/session-3.scope\n";
static const char *const docker_systemd = "0::/system.slice/docker-" HEX_A ".scope\n";
static const char *const docker_cgroupfs = "0::/docker/" HEX_B "\n";
static const char *const containerd =
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice/"
    "cri-containerd-" HEX_C ".scope\n";
/* Read from inside the tracer's own cgroup namespace, as a DaemonSet pod sees it. */
static const char *const containerd_relative =
    "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod9.slice/"
    "cri-containerd-" HEX_A ".scope\n";
static const char *const crio = "0::/kubepods.slice/kubepods-burstable.slice/"
				"kubepods-burstable-pod77.slice/crio-" HEX_D ".scope\n";

static void build_tree(void)
{
	proc(1, 0, "systemd", no_container, ARGS("/sbin/init"));
	/* a kernel thread: no command line */
	proc(2, 0, "kthreadd", "0::/\n", (const char *const[]){ NULL });
	/* vLLM: the API server, its engine (renamed), and a worker under the engine. */
	proc(100, 1, "vllm", docker_systemd,
	     ARGS("/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--port",
		  "8000"));
	proc(101, 100, "VLLM::EngineCor", docker_systemd, ARGS("VLLM::EngineCore"));
	proc(102, 101, "python3", docker_systemd,
	     ARGS("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x"));
	proc(150, 1, "python3", containerd,
	     ARGS("python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"));
	/* SGLang and its scheduler */
	proc(200, 1, "python3", crio,
	     ARGS("python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"));
	proc(201, 200, "sglang::schedul", crio, ARGS("sglang::scheduler_TP0"));
	/* TGI: the launcher starts the router and the shards */
	proc(300, 1, "text-generation", docker_cgroupfs,
	     ARGS("text-generation-launcher", "--model-id", "m"));
	proc(301, 300, "text-generation", docker_cgroupfs,
	     ARGS("text-generation-router", "--port", "80"));
	proc(302, 300, "text-generation", docker_cgroupfs,
	     ARGS("/opt/conda/bin/python3.11", "/opt/conda/bin/text-generation-server", "serve",
		  "m"));
	/* llama.cpp */
	proc(400, 1, "llama-server", no_container,
	     ARGS("/opt/llama.cpp/build/bin/llama-server", "-m", "/models/q4.gguf", "--port",
		  "8080"));
	proc(410, 1, "server", no_container, ARGS("./server", "--model", "/models/Q8_0.GGUF"));
	proc(411, 1, "server", no_container, ARGS("./server", "--port", "80"));
	/* Ollama: the server and its runner; `ollama run` is a client */
	proc(500, 1, "ollama", containerd_relative, ARGS("/bin/ollama", "serve"));
	proc(501, 500, "ollama", containerd_relative,
	     ARGS("/bin/ollama", "runner", "--model", "/root/.ollama/models/blobs/sha256-1"));
	proc(510, 1, "ollama", no_container, ARGS("ollama", "run", "llama3"));
	/* unrelated */
	proc(600, 1, "python3", no_container, ARGS("python3", "-m", "http.server", "8000"));
	proc(601, 1, "bash", no_container, ARGS("bash"));
	proc(602, 1, "uvicorn", docker_systemd,
	     ARGS("/usr/bin/python3", "/usr/local/bin/uvicorn", "shop.api:app", "--port", "8000"));
	proc(603, 1, "vllm", no_container,
	     ARGS("/usr/bin/python3", "/usr/local/bin/vllm", "chat", "--url", "x"));
	/* a directory that is not a process, and a process that exited (no stat) */
	put(root, "self", "", 0);
	{
		char dir[128];

		snprintf(dir, sizeof(dir), "%s/999", root);
		mkdir(dir, 0755);
	}
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(path);
}

static void setup(void)
{
	snprintf(root, sizeof(root), "/tmp/ts-discover-XXXXXX");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		exit(1);
	}
	build_tree();
}

static void teardown(void)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

struct want {
	uint32_t pid;
	const char *server, *runtime, *id, *short_id;
};

TEST(test_scan)
{
	static const struct want want[] = {
		{ 100, "vllm", "docker", HEX_A, "0123456789ab" },
		{ 150, "vllm", "containerd", HEX_C, "aaaabbbbcccc" },
		{ 200, "sglang", "cri-o", HEX_D, "d00dfeed0000" },
		{ 300, "tgi", "docker", HEX_B, "fedcba987654" },
		{ 400, "llama.cpp", "", "", "" },
		{ 410, "llama.cpp", "", "", "" },
		{ 500, "ollama", "containerd", HEX_A, "0123456789ab" },
	};
	struct discovered out[32];
	size_t n;

	if (!ASSERT_OK(discover_scan(root, out, 32, &n), "scan"))
		return;
	if (!ASSERT_EQ(n, sizeof(want) / sizeof(want[0]), "servers found"))
		for (size_t i = 0; i < n; i++)
			printf("  found %u %s (%s)\n", out[i].pid, out[i].server, out[i].rule);
	for (size_t i = 0; i < n && i < sizeof(want) / sizeof(want[0]); i++) {
		ASSERT_EQ(out[i].pid, want[i].pid, "pid");
		ASSERT_STREQ(out[i].server, want[i].server, "server");
		ASSERT_STREQ(out[i].runtime, want[i].runtime, "runtime");
		ASSERT_STREQ(out[i].container_id, want[i].id, "container id");
		ASSERT_STREQ(out[i].container_short, want[i].short_id, "short id");
		ASSERT_TRUE(out[i].rule && *out[i].rule, "rule");
	}
	ASSERT_STREQ(out[0].rule, "vllm serve", "vllm rule");
	ASSERT_STREQ(out[0].comm, "vllm", "comm");
	ASSERT_EQ(out[0].ppid, 1, "ppid");
	ASSERT_STREQ(out[5].rule, "server --model *.gguf", "llama.cpp server rule");
}

TEST(test_scan_limit)
{
	struct discovered out[3];
	size_t n;

	ASSERT_EQ(discover_scan(root, out, 3, &n), -E2BIG, "more than max");
	ASSERT_EQ(n, 3, "stored");
	ASSERT_EQ(out[2].pid, 200, "first three in pid order");
	ASSERT_EQ(discover_scan("/nonexistent-proc", out, 3, &n), -ENOENT, "no proc");
	ASSERT_EQ(n, 0, "none");
}

TEST(test_container)
{
	char id[DISCOVER_ID_LEN + 1];
	const char *rt;

	ASSERT_TRUE(discover_container(docker_systemd, id, &rt), "docker systemd");
	ASSERT_STREQ(id, HEX_A, "docker id");
	ASSERT_FALSE(discover_container(no_container, id, &rt), "host process");
	ASSERT_STREQ(id, "", "no id");
	ASSERT_STREQ(rt, "", "no runtime");
	ASSERT_FALSE(discover_container("0::/\n", id, &rt), "root cgroup");
	/* cgroup v1: the v2 line is absent, any hierarchy names the container */
	ASSERT_TRUE(
	    discover_container("12:pids:/docker/" HEX_B "\n11:memory:/docker/" HEX_B "\n", id, &rt),
	    "v1 docker");
	ASSERT_STREQ(id, HEX_B, "v1 id");
	ASSERT_STREQ(rt, "docker", "v1 runtime");
	/* a host with v1 hierarchies alone lists "0::/" too: a v1 path names the container */
	ASSERT_TRUE(discover_container("12:pids:/kubepods/burstable/pod1/" HEX_A
				       "\n1:name=systemd:/\n0::/\n",
				       id, &rt),
		    "v1 host");
	ASSERT_STREQ(id, HEX_A, "its id from the v1 line");
	/* the v2 line wins over v1 lines (hybrid hierarchy) */
	ASSERT_TRUE(discover_container("1:name=systemd:/init.scope\n0::/kubepods/burstable/"
				       "pod1a2b-3c4d/" HEX_C "\n",
				       id, &rt),
		    "kubepods cgroupfs");
	ASSERT_STREQ(id, HEX_C, "kubepods id");
	ASSERT_STREQ(rt, "kubernetes", "kubepods runtime");
	ASSERT_TRUE(
	    discover_container("0::/machine.slice/libpod-" HEX_D ".scope/container\n", id, &rt),
	    "podman");
	ASSERT_STREQ(rt, "podman", "podman runtime");
	/* not 64 hex digits: not an id */
	ASSERT_FALSE(discover_container("0::/system.slice/docker-0123.scope\n", id, &rt), "short");
	ASSERT_FALSE(discover_container("0::/system.slice/docker.service\n", id, &rt), "daemon");
}

TEST(test_match)
{
	static const char sh[] = "python3\0-m\0sglang.srt.entrypoints.http_server\0";
	static const char llcpp[] = "python3\0-m\0llama_cpp.server\0--model\0a.gguf\0";
	static const char notsrv[] = "python3\0train.py\0-m\0vllm.entrypoints.openai.api_server\0";
	const char *rule;

	ASSERT_STREQ(discover_match(sh, sizeof(sh) - 1, "python3", &rule), "sglang", "sglang.srt");
	ASSERT_STREQ(discover_match(llcpp, sizeof(llcpp) - 1, "python3", &rule), "llama.cpp",
		     "llama_cpp.server");
	/* `-m` after the script belongs to the script */
	ASSERT_TRUE(discover_match(notsrv, sizeof(notsrv) - 1, "python3", &rule) == NULL,
		    "script argument");
	ASSERT_TRUE(discover_match("", 0, "kthreadd", &rule) == NULL, "kernel thread");
}

TEST(test_rescan)
{
	struct discover_set set;
	struct discovered out[32];
	size_t n, fresh = 0;

	discover_set_init(&set);
	if (!ASSERT_OK(discover_scan(root, out, 32, &n), "scan"))
		return;
	for (size_t i = 0; i < n; i++)
		if (discover_is_new(&set, &out[i]))
			ASSERT_EQ(discover_set_add(&set, out[i].pid), 1, "added");
	ASSERT_EQ(set.n, n, "all attached");
	ASSERT_EQ(discover_set_add(&set, 100), 0, "already there");

	/* a new server starts; the llama.cpp server at 400 exits */
	proc(700, 1, "llama-server", crio, ARGS("llama-server", "-hf", "org/model-GGUF"));
	ASSERT_EQ(discover_set_remove(&set, 400), 1, "exited root removed");
	ASSERT_EQ(discover_set_remove(&set, 400), 0, "removed once");
	if (!ASSERT_OK(discover_scan(root, out, 32, &n), "rescan"))
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (!discover_is_new(&set, &out[i]))
			continue;
		fresh++;
		/* 400 is still in the fake tree: a reused pid is attached again */
		ASSERT_TRUE(out[i].pid == 700 || out[i].pid == 400, "new pid");
		discover_set_add(&set, out[i].pid);
	}
	ASSERT_EQ(fresh, 2, "new ones");
	ASSERT_TRUE(discover_set_contains(&set, 700), "700 attached");
	ASSERT_FALSE(discover_set_contains(&set, 701), "never seen");
	for (uint32_t pid = 1000; pid > 800; pid--)
		discover_set_add(&set, pid);
	for (size_t i = 1; i < set.n; i++)
		if (!ASSERT_TRUE(set.pids[i - 1] < set.pids[i], "sorted"))
			break;
out:
	discover_set_free(&set);
}

/* A process found by its traffic: described from /proc by pid, whatever its command line. */
TEST(test_describe)
{
	struct discovered d;

	if (!ASSERT_OK(discover_describe(root, 602, NULL, "sse-traffic", &d), "describe"))
		return;
	ASSERT_EQ(d.pid, 602, "pid");
	ASSERT_EQ(d.ppid, 1, "ppid");
	ASSERT_TRUE(d.server == NULL, "no server kind");
	ASSERT_STREQ(d.rule, "sse-traffic", "rule");
	ASSERT_STREQ(d.comm, "uvicorn", "comm");
	ASSERT_STREQ(d.runtime, "docker", "runtime");
	ASSERT_STREQ(d.container_short, "0123456789ab", "container");
	ASSERT_OK(discover_describe(root, 601, NULL, "ndjson-traffic", &d), "on the host");
	ASSERT_STREQ(d.container_id, "", "no container");
	ASSERT_EQ(discover_describe(root, 999, NULL, "sse-traffic", &d), -ESRCH, "exited");
	ASSERT_EQ(discover_describe(root, 4242, NULL, "sse-traffic", &d), -ESRCH, "no such pid");
	ASSERT_STREQ(discover_traffic_rule(TS_TRAFFIC_SSE), "sse-traffic", "SSE rule");
	ASSERT_STREQ(discover_traffic_rule(TS_TRAFFIC_NDJSON), "ndjson-traffic", "NDJSON rule");
	ASSERT_TRUE(discover_traffic_rule(TS_TRAFFIC_NONE) == NULL, "no rule for no match");
	ASSERT_TRUE(discover_traffic_rule(3) == NULL, "no rule for an unknown kind");
}

int main(void)
{
	int rc;

	setup();
	rc = check_run_all();
	teardown();
	return rc;
}
