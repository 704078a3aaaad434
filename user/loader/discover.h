/* SPDX-License-Identifier: MIT */
/*
 * Node-wide discovery of inference servers for `tokenscope trace --all`: which processes under
 * a /proc tree are LLM inference servers, by rules on their command line and comm, and which
 * container each runs in (from its cgroup path). The loader scans at start and rescans on a
 * timer; a discover_set remembers which pids it already attached so only new ones are attached.
 *
 * Rules (argv is /proc/PID/cmdline split at NULs; "name" is the basename of argv[0], or of
 * argv[1] when argv[0] is an interpreter such as python3, as for a shebang script):
 *   vllm       name `vllm` followed by `serve`; `-m vllm.entrypoints.*` (the OpenAI API server,
 *              `vllm.entrypoints.openai.api_server`, and the CLI module).
 *              (`vllm chat`, `vllm bench` are clients and comm `vllm` alone says nothing more.)
 *   sglang     `-m sglang.launch_server`; `-m sglang.srt.*`.
 *   tgi        name `text-generation-launcher`, `text-generation-router` or
 *              `text-generation-server`.
 *   llama.cpp  name `llama-server`; name `server` with `-m`/`--model` and a `*.gguf` argument;
 *              `-m llama_cpp.server` (llama-cpp-python).
 *   ollama     name `ollama` followed by `serve` (`ollama run` is a client; the `ollama runner`
 *              processes are children of the server).
 * Only the top of a server's process tree is reported: a match with a matching ancestor is
 * skipped, because tracing a process follows its descendants (vLLM's engine and worker
 * processes, TGI's shards, Ollama's runners).
 *
 * Traffic rules, for servers no command line tells from any other web app (a home-grown
 * uvicorn app, a Go or Node server): the kernel side looks at the first bytes of every write
 * an untraced process makes (include/traffic.h, bpf/lib/traffic.bpf.h) and remembers the
 * processes whose writes to a stream socket start like a streamed completion frame; the loader
 * drains that map and attaches to them. Nothing is sent to such a server, and none of its bytes
 * leave the kernel before it is attached.
 *   sse-traffic     an SSE frame with a JSON object (`data: {`, `data:{`), or Anthropic /
 *                   OpenAI Responses `event:` lines, after an optional chunk-size line.
 *   ndjson-traffic  an Ollama NDJSON object (`{"model":"`), after an optional chunk-size line.
 * Such a process is attached itself, with its descendants, not the top of its process tree:
 * it is the one that writes.
 *
 * Container ids: from the cgroup v2 line `0::PATH` (else the first v1 line), the deepest path
 * component that is 64 hex digits after dropping a runtime prefix and a `.scope` suffix:
 * `docker-ID.scope` or `/docker/ID` (docker), `cri-containerd-ID.scope` (containerd/CRI),
 * `crio-ID.scope` (CRI-O), `libpod-ID.scope` (podman), `/kubepods/.../podUID/ID` (cgroupfs
 * driver). Paths relative to the reader's cgroup namespace (`/../..`) work the same.
 */
#ifndef TS_DISCOVER_H
#define TS_DISCOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DISCOVER_ID_LEN 64    /* hex digits of a full container id */
#define DISCOVER_SHORT_LEN 12 /* the short id docker and crictl print */

struct discovered {
	uint32_t pid;
	uint32_t ppid;
	/* "vllm", "sglang", "tgi", "llama.cpp", "ollama"; NULL when found by its traffic */
	const char *server;
	const char *rule; /* what matched, e.g. "vllm serve", "sse-traffic" */
	/* printable (utf8_clean): a process names itself, escape sequences included */
	char comm[16 * 3 + 1];
	const char *runtime; /* "docker", "containerd", "cri-o", "podman", ""... */
	char container_id[DISCOVER_ID_LEN + 1]; /* "" when not in a container */
	char container_short[DISCOVER_SHORT_LEN + 1];
};

/*
 * Scans proc_root ("/proc", or a fake tree in tests) and stores the top processes of inference
 * servers in out, in pid order, up to max; *n is how many were stored. Returns 0, -E2BIG when
 * more than max matched (out holds the first max), or -errno when proc_root cannot be read.
 * Processes that exit during the scan are skipped.
 */
int discover_scan(const char *proc_root, struct discovered *out, size_t max, size_t *n);

/*
 * Describes process pid, found by rule (server as in struct discovered), from proc_root: its
 * parent, comm and container. 0, or -ESRCH when it is gone.
 */
int discover_describe(const char *proc_root, uint32_t pid, const char *server, const char *rule,
		      struct discovered *d);

/* The traffic rule of an enum ts_traffic_kind ("sse-traffic", "ndjson-traffic"), or NULL. */
const char *discover_traffic_rule(unsigned int kind);

/* The server a command line (NUL-separated, len bytes) and comm are, or NULL; *rule says why. */
const char *discover_match(const char *cmdline, size_t len, const char *comm, const char **rule);

/*
 * Parses the text of /proc/PID/cgroup. Returns true and fills id (DISCOVER_ID_LEN + 1 bytes)
 * and *runtime when the path names a container; else id is "" and *runtime "".
 */
bool discover_container(const char *cgroup_text, char *id, const char **runtime);
/* The paths of /proc/PID/cgroup's text handed to found, the v2 line's first, then each v1
 * hierarchy's (a host with v1 alone lists "0::/" too), until found returns true: true then. */
bool discover_cgroup_find(const char *cgroup_text,
			  bool (*found)(const char *path, size_t len, void *ctx), void *ctx);

/* The pids already attached, so a rescan attaches only new ones. */
struct discover_set {
	uint32_t *pids; /* sorted */
	size_t n, cap;
};

void discover_set_init(struct discover_set *s);
void discover_set_free(struct discover_set *s);
/* 1 when added, 0 when already there, -ENOMEM. */
int discover_set_add(struct discover_set *s, uint32_t pid);
bool discover_set_contains(const struct discover_set *s, uint32_t pid);
/* 1 when removed, 0 when absent (the loader calls it when a root exits: pids are reused). */
int discover_set_remove(struct discover_set *s, uint32_t pid);
/* True when a scan result is not attached yet. */
bool discover_is_new(const struct discover_set *s, const struct discovered *d);

#endif
