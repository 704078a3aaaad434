// SPDX-License-Identifier: MIT
/*
 * The loader's reading of what a node's container runtime leaves (user/loader/container.c): a
 * process's /proc/PID/cgroup (the pod UID and the container id in its paths) and the OCI
 * bundle's config.json in the runtime's state directory (the kubelet's annotations). The state
 * directory is another process's to write: the input lays out a hostile one in a directory of
 * the target's, with config.json a regular file, a symbolic link to one, a FIFO, a directory or
 * a file past the size limit, in containerd's CRI namespace, another containerd namespace or
 * CRI-O's place; then container_workload reads it as the loader does, and container_pod_uid
 * and container_annotations read the texts alone.
 *
 * Input: u8 flags, u8 kind of config.json, then NUL-ended strings: the cgroup text (flag
 * FC_RAW_CGROUP: as it is; else a path built around it: the string is the pod UID, put in a
 * kubelet's cgroupfs or systemd path with a valid container id), then config.json's content
 * (the rest of the input).
 *
 * Properties: container_workload returns 0 or -ESRCH and never waits (a FIFO would hang it:
 * libFuzzer's -timeout); the container id is "" or 64 lower-case hex digits; the pod UID is "" or
 * a whole UID (8-4-4-4-12 lower-case hex) that the cgroup text or the bundle holds (with '_' for
 * '-' under systemd), never a mixture and never a prefix; the names are printable UTF-8 and are
 * read only from a regular file of the allowed size, never through a link, a FIFO or a
 * directory; container_pod_uid leaves its buffer untouched when it finds nothing.
 */
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_outputs.h"
#include "loader/container.h"

#define FUZZ_PID 4242
#define FUZZ_CGROUP_MAX 4000
#define FUZZ_ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

enum {
	FC_RAW_CGROUP = 1, /* the cgroup text as given */
	FC_SYSTEMD = 2,	   /* built: systemd's slice path (else cgroupfs's) */
	FC_CRIO = 4,	   /* the bundle in CRI-O's place (else containerd's) */
	FC_OTHER_NS = 8,   /* containerd: another namespace than k8s.io */
};

/* What stands where config.json goes. */
enum { BUNDLE_FILE, BUNDLE_LINK, BUNDLE_FIFO, BUNDLE_DIR, BUNDLE_HUGE, BUNDLE_NONE, BUNDLE_KINDS };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rm(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(p);
}

/* path's folders made, under the target's directory. */
static void make_dirs(char *path)
{
	for (char *slash = strchr(path + strlen(fuzz_tmpdir()) + 1, '/'); slash;
	     slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(path, 0755);
		*slash = '/';
	}
}

static void put(const char *path, const char *s, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f)
		abort();
	if (n && fwrite(s, 1, n, f) != n)
		abort();
	fclose(f);
}

/* s[0..36) is a pod UID as the kubelet writes one (dashes, or '_' for systemd's). */
FUZZ_CHECKER static bool whole_uid(const char *s)
{
	for (int i = 0; i < WORKLOAD_UID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? s[i] != '-'
			 : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return s[WORKLOAD_UID_LEN] == 0;
}

/* uid, with '-' or '_' at its dashes, is in text. */
FUZZ_CHECKER static bool uid_in(const char *uid, const char *text, size_t n)
{
	char under[WORKLOAD_UID_LEN + 1];

	for (int i = 0; i <= WORKLOAD_UID_LEN; i++)
		under[i] = uid[i] == '-' ? '_' : uid[i];
	return memmem(text, n, uid, WORKLOAD_UID_LEN) || memmem(text, n, under, WORKLOAD_UID_LEN);
}

FUZZ_CHECKER static void check_name(const char *what, const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, 0, cap), "%s not terminated", what);
	fuzz_check_text(what, s, strlen(s), NULL);
	FUZZ_CHECK(!strchr(s, '\n'), "%s holds a newline", what);
}

FUZZ_CHECKER static void check_uid_alone(const char *cgroup)
{
	char uid[WORKLOAD_UID_LEN + 1];

	memset(uid, 'z', sizeof(uid));
	if (container_pod_uid(cgroup, uid)) {
		FUZZ_CHECK(whole_uid(uid), "container_pod_uid gave \"%.*s\"", WORKLOAD_UID_LEN,
			   uid);
		FUZZ_CHECK(uid_in(uid, cgroup, strlen(cgroup)),
			   "a UID the cgroup text does not hold");
	} else {
		for (size_t i = 0; i < sizeof(uid); i++)
			FUZZ_CHECK(uid[i] == 'z', "found nothing, but wrote byte %zu", i);
	}
}

FUZZ_CHECKER static void check_annotations_alone(const char *json, size_t n)
{
	struct workload w;

	memset(&w, 0, sizeof(w));
	container_annotations(json, n, &w);
	FUZZ_CHECK(!w.pod_uid[0] || (whole_uid(w.pod_uid) && uid_in(w.pod_uid, json, n)),
		   "annotations gave the UID \"%s\"", w.pod_uid);
	check_name("namespace", w.k8s_namespace, sizeof(w.k8s_namespace));
	check_name("pod", w.k8s_pod, sizeof(w.k8s_pod));
	check_name("container", w.k8s_container, sizeof(w.k8s_container));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	uint8_t flags = fuzz_u8(&in), kind = fuzz_u8(&in) % BUNDLE_KINDS;
	char *given = fuzz_str(&in, FUZZ_CGROUP_MAX), cgroup[FUZZ_CGROUP_MAX + 256];
	size_t json_len;
	const char *json = (const char *)fuzz_bytes(&in, in.n, &json_len);
	char root[128], state[160], proc[160], path[512], target[512];
	const char *dir_given[1];
	struct container_dirs dirs;
	struct workload w;
	int rc;

	if (flags & FC_RAW_CGROUP)
		snprintf(cgroup, sizeof(cgroup), "%s", given);
	else if (flags & FC_SYSTEMD)
		snprintf(
		    cgroup, sizeof(cgroup),
		    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
		    "cri-containerd-" FUZZ_ID ".scope\n",
		    given);
	else
		snprintf(cgroup, sizeof(cgroup), "0::/kubepods/burstable/pod%s/" FUZZ_ID "\n",
			 given);
	free(given);

	snprintf(root, sizeof(root), "%s/t", fuzz_tmpdir());
	nftw(root, rm, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(state, sizeof(state), "%s/state", root);
	snprintf(proc, sizeof(proc), "%s/proc", root);
	snprintf(path, sizeof(path), "%s/%d/cgroup", proc, FUZZ_PID);
	make_dirs(path);
	put(path, cgroup, strlen(cgroup));
	if (flags & FC_CRIO)
		snprintf(path, sizeof(path), "%s/overlay-containers/%s/userdata/config.json", state,
			 FUZZ_ID);
	else
		snprintf(path, sizeof(path), "%s/io.containerd.runtime.v2.task/%s/%s/config.json",
			 state, flags & FC_OTHER_NS ? "default" : "k8s.io", FUZZ_ID);
	make_dirs(path);
	switch (kind) {
	case BUNDLE_FILE:
		put(path, json, json_len);
		break;
	case BUNDLE_LINK:
		/* A bundle elsewhere, which would be read if the link were followed. */
		snprintf(target, sizeof(target), "%s/elsewhere.json", root);
		put(target, json, json_len);
		if (symlink(target, path))
			abort();
		break;
	case BUNDLE_FIFO:
		if (mkfifo(path, 0600))
			abort();
		break;
	case BUNDLE_DIR:
		if (mkdir(path, 0700))
			abort();
		break;
	case BUNDLE_HUGE: {
		FILE *f = fopen(path, "w");

		if (!f || (json_len && fwrite(json, 1, json_len, f) != json_len) ||
		    ftruncate(fileno(f), CONTAINER_BUNDLE_MAX + 1))
			abort();
		fclose(f);
		break;
	}
	}

	dir_given[0] = state;
	container_dirs_init(&dirs, dir_given, 1);
	/* Only the state laid out here: the node's own defaults are not the input's. */
	dirs.n = 1;
	rc = container_workload(proc, FUZZ_PID, &dirs, &w);
	FUZZ_CHECK(rc == 0 || rc == -ESRCH, "container_workload returned %d", rc);
	FUZZ_CHECK(!w.container_id[0] ||
		       (strlen(w.container_id) == WORKLOAD_ID_LEN &&
			strspn(w.container_id, "0123456789abcdef") == WORKLOAD_ID_LEN),
		   "container id \"%s\"", w.container_id);
	FUZZ_CHECK(!w.pod_uid[0] || whole_uid(w.pod_uid), "pod UID \"%s\" is not a whole one",
		   w.pod_uid);
	FUZZ_CHECK(!w.pod_uid[0] || uid_in(w.pod_uid, cgroup, strlen(cgroup)) ||
		       (kind == BUNDLE_FILE && uid_in(w.pod_uid, json, json_len)),
		   "pod UID \"%s\" is in neither the cgroup text nor a bundle that may be read",
		   w.pod_uid);
	check_name("namespace", w.k8s_namespace, sizeof(w.k8s_namespace));
	check_name("pod", w.k8s_pod, sizeof(w.k8s_pod));
	check_name("container", w.k8s_container, sizeof(w.k8s_container));
	if (kind != BUNDLE_FILE)
		FUZZ_CHECK(!w.k8s_namespace[0] && !w.k8s_pod[0] && !w.k8s_container[0],
			   "names read from a config.json that is not a regular file (kind %u)",
			   kind);

	check_uid_alone(cgroup);
	check_annotations_alone(json, json_len);
	return 0;
}
