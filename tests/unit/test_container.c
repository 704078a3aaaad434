// SPDX-License-Identifier: MIT
/*
 * A process's workload from what the node holds (user/loader/container.c): pod UIDs in cgroup
 * paths of both drivers, and the names in containerd's and CRI-O's bundles, on a fake /proc
 * tree and fake runtime state under /tmp.
 */
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loader/container.h"

#define ID_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ID_B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define UID "12345678-aaaa-bbbb-cccc-0123456789ab"
#define UID_ "12345678_aaaa_bbbb_cccc_0123456789ab"

static char root[64];

/* dir/file (its folders made) holding s. */
static void put(const char *file, const char *s)
{
	char path[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, file);
	for (slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(path, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	if (!f)
		return;
	fputs(s, f);
	fclose(f);
}

static int rm(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(p);
}

static const char containerd_config[] =
    "{\"ociVersion\":\"1.0.2\",\"process\":{\"args\":[\"vllm\",\"serve\"],\"env\":[\"A=1\"]},"
    "\"annotations\":{\"io.kubernetes.cri.container-type\":\"container\","
    "\"io.kubernetes.cri.sandbox-id\":\"" ID_B "\","
    "\"io.kubernetes.cri.sandbox-name\":\"vllm-7d9f-x2\","
    "\"io.kubernetes.cri.sandbox-namespace\":\"inference\","
    "\"io.kubernetes.cri.sandbox-uid\":\"" UID "\","
    "\"io.kubernetes.cri.container-name\":\"engine\"}}";

static const char crio_config[] =
    "{\"ociVersion\":\"1.0.2\",\"annotations\":{"
    "\"io.kubernetes.pod.name\":\"sglang-0\",\"io.kubernetes.pod.namespace\":\"serving\","
    "\"io.kubernetes.pod.uid\":\"" UID "\",\"io.kubernetes.container.name\":\"server\","
    "\"io.kubernetes.cri-o.ContainerType\":\"container\"}}";

static bool annotations(const char *json, struct workload *w)
{
	return container_annotations(json, strlen(json), w);
}

TEST(test_pod_uid)
{
	char uid[WORKLOAD_UID_LEN + 1];

	ASSERT_TRUE(container_pod_uid("0::/kubepods.slice/kubepods-burstable.slice/"
				      "kubepods-burstable-pod" UID_ ".slice/cri-containerd-" ID_A
				      ".scope\n",
				      uid),
		    "systemd driver");
	ASSERT_STREQ(uid, UID, "underscores made dashes");
	ASSERT_TRUE(container_pod_uid(
			"0::/kubepods.slice/kubepods-pod" UID_ ".slice/crio-" ID_A ".scope\n", uid),
		    "guaranteed class (no QoS level)");
	ASSERT_STREQ(uid, UID, "uid");
	ASSERT_TRUE(container_pod_uid("0::/kubepods/besteffort/pod" UID "/" ID_A "\n", uid),
		    "cgroupfs driver");
	ASSERT_STREQ(uid, UID, "uid");
	ASSERT_TRUE(container_pod_uid("0::/../../kubepods-besteffort-pod" UID_
				      ".slice/cri-containerd-" ID_A ".scope\n",
				      uid),
		    "relative to the reader's cgroup namespace");
	ASSERT_TRUE(
	    container_pod_uid("12:cpu:/kubepods/pod" UID "/" ID_A "\n1:name=systemd:/\n", uid),
	    "cgroup v1: the first line");
	ASSERT_TRUE(
	    container_pod_uid("0::/\n4:memory:/kubepods/burstable/pod" UID "/" ID_A "\n", uid),
	    "a v1 host lists 0::/ and the pod in its v1 hierarchies");
	ASSERT_STREQ(uid, UID, "uid");
	ASSERT_FALSE(container_pod_uid("0::/system.slice/docker-" ID_A ".scope\n", uid),
		     "a plain container is in no pod");
	ASSERT_FALSE(container_pod_uid("0::/user.slice/pod" UID "/x\n", uid),
		     "pod<UID> outside kubepods is someone else's name");
	ASSERT_FALSE(container_pod_uid("0::/kubepods/podnot-a-uid/" ID_A "\n", uid), "no UID");
	ASSERT_FALSE(container_pod_uid("0::/kubepods.slice/kubepods-pod" UID_ "x.slice/\n", uid),
		     "a UID of the wrong length");
	ASSERT_FALSE(container_pod_uid("garbage", uid), "no cgroup line");
}

/* A UID is checked whole before a byte of it is written: a failed one leaves nothing behind, and
 * two never mix (the defects an outside fuzz run found). */
TEST(test_pod_uid_whole)
{
	char uid[WORKLOAD_UID_LEN + 1];
	struct workload w;

	/* pod<good>/pod<bad>: the bad one's 35 characters once overwrote the good one's. */
	memset(uid, 'z', sizeof(uid));
	ASSERT_TRUE(container_pod_uid("0::/kubepods/pod" UID "/pod"
				      "ffffffff-aaaa-bbbb-cccc-0123456789aX/" ID_A "\n",
				      uid),
		    "the good UID of the two");
	ASSERT_STREQ(uid, UID, "not a mixture");
	/* Nothing matched: the buffer is not touched (no leftover prefix). */
	memset(uid, 'z', sizeof(uid));
	uid[WORKLOAD_UID_LEN] = 0;
	ASSERT_FALSE(
	    container_pod_uid("0::/kubepods/pod12345678-aaaa-bbbb-cccc-0123456789aX/x\n", uid),
	    "a bad last character");
	ASSERT_STREQ(uid, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "untouched");
	/* Separators mixed ('_' and '-'): no runtime writes that (found by fuzz_container). */
	ASSERT_FALSE(
	    container_pod_uid("0::/kubepods/pod12345678_aaaa_bbbb_cccc-0121728394ab/x\n", uid),
	    "mixed separators under cgroupfs");
	ASSERT_FALSE(container_pod_uid("0::/kubepods.slice/kubepods-burstable.slice/"
				       "kubepods-burstable-pod12345678_aaaa-bbbb_cccc_0121728394ab"
				       ".slice/x\n",
				       uid),
		     "mixed separators under systemd");
	ASSERT_STREQ(uid, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "untouched by either");
	/* container_workload's UID comes only from a whole match. */
	memset(&w, 0, sizeof(w));
	ASSERT_FALSE(
	    annotations("{\"annotations\":{\"io.kubernetes.pod.name\":\"p\","
			"\"io.kubernetes.pod.uid\":\"12345678-aaaa-bbbb-cccc-0123456789a\"}}",
			&w) &&
		w.pod_uid[0],
	    "a 35-character annotation");
	ASSERT_STREQ(w.pod_uid, "", "no UID taken from 35 characters");
	memset(&w, 0, sizeof(w));
	annotations("{\"annotations\":{\"io.kubernetes.pod.name\":\"p\","
		    "\"io.kubernetes.pod.uid\":\"" UID "ab\"}}",
		    &w);
	ASSERT_STREQ(w.pod_uid, "", "a 38-character annotation is not cut to a UID");
	memset(&w, 0, sizeof(w));
	annotations("{\"annotations\":{\"io.kubernetes.cri.sandbox-name\":\"p\","
		    "\"io.kubernetes.cri.sandbox-uid\":\"" UID "\"}}",
		    &w);
	ASSERT_STREQ(w.pod_uid, UID, "a whole one is");
}

TEST(test_annotations)
{
	struct workload w = { 0 };

	ASSERT_TRUE(container_annotations(containerd_config, strlen(containerd_config), &w),
		    "containerd's CRI plugin");
	ASSERT_STREQ(w.k8s_namespace, "inference", "namespace");
	ASSERT_STREQ(w.k8s_pod, "vllm-7d9f-x2", "pod");
	ASSERT_STREQ(w.k8s_container, "engine", "container");
	ASSERT_STREQ(w.pod_uid, UID, "the annotation's UID fills a gap");
	memset(&w, 0, sizeof(w));
	snprintf(w.pod_uid, sizeof(w.pod_uid), "ffffffff-aaaa-bbbb-cccc-0123456789ab");
	ASSERT_TRUE(container_annotations(crio_config, strlen(crio_config), &w), "CRI-O");
	ASSERT_STREQ(w.k8s_namespace, "serving", "namespace");
	ASSERT_STREQ(w.k8s_pod, "sglang-0", "pod");
	ASSERT_STREQ(w.k8s_container, "server", "container");
	ASSERT_STREQ(w.pod_uid, "ffffffff-aaaa-bbbb-cccc-0123456789ab",
		     "the cgroup's UID is kept over the annotation's");

	memset(&w, 0, sizeof(w));
	ASSERT_TRUE(annotations("{\"annotations\":{\"io.kubernetes.cri.container-type\":"
				"\"sandbox\",\"io.kubernetes.cri.sandbox-name\":\"p\","
				"\"io.kubernetes.cri.container-name\":\"POD\"}}",
				&w),
		    "a sandbox");
	ASSERT_STREQ(w.k8s_container, "", "the pause container has no container name");
	memset(&w, 0, sizeof(w));
	ASSERT_FALSE(annotations("{\"annotations\":{\"org.opencontainers.image.ref\":\"x\"}}", &w),
		     "a container no kubelet made");
	ASSERT_FALSE(annotations("{\"annotations\":", &w), "truncated JSON");
	ASSERT_FALSE(annotations("\x01\x02garbage", &w), "garbage");
	ASSERT_STREQ(w.k8s_pod, "", "nothing taken");
	memset(&w, 0, sizeof(w));
	ASSERT_TRUE(annotations("{\"annotations\":{\"io.kubernetes.pod.name\":"
				"\"a\\u001b[31mb\\nc\"}}",
				&w),
		    "escapes in a name");
	ASSERT_FALSE(strchr(w.k8s_pod, '\x1b') || strchr(w.k8s_pod, '\n'),
		     "control bytes never reach an output");
}

TEST(test_bundles)
{
	struct container_dirs dirs;
	const char *given[2];
	char state[128], storage[128], huge_path[256], target[256], *huge;
	struct workload w;
	FILE *f;

	snprintf(root, sizeof(root), "/tmp/ts-workload-XXXXXX");
	if (!ASSERT_OK_PTR(mkdtemp(root), "mkdtemp"))
		return;
	snprintf(state, sizeof(state), "%s/containerd", root);
	snprintf(storage, sizeof(storage), "%s/storage", root);
	given[0] = state;
	given[1] = storage;
	container_dirs_init(&dirs, given, 2);
	ASSERT_EQ(dirs.n, 6, "the given directories, then the four defaults");
	ASSERT_STREQ(dirs.dir[0], state, "given first");

	/* A containerd pod's server, a CRI-O pod's, a plain container's, a host process. */
	put("containerd/io.containerd.runtime.v2.task/k8s.io/" ID_A "/config.json",
	    containerd_config);
	put("storage/overlay-containers/" ID_B "/userdata/config.json", crio_config);
	put("proc/10/cgroup",
	    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
	    ".slice/cri-containerd-" ID_A ".scope\n");
	put("proc/11/cgroup", "0::/kubepods/burstable/pod" UID "/" ID_B "\n");
	put("proc/13/cgroup", "0::/user.slice/session-1.scope\n");
	put("proc/14/cgroup",
	    "0::/system.slice/docker-"
	    "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999.scope\n");
	snprintf(huge_path, sizeof(huge_path), "%s/proc", root);

	ASSERT_OK(container_workload(huge_path, 10, &dirs, &w), "containerd pod");
	ASSERT_STREQ(w.container_id, ID_A, "container id");
	ASSERT_STREQ(w.pod_uid, UID, "pod uid");
	ASSERT_STREQ(w.k8s_namespace, "inference", "namespace");
	ASSERT_STREQ(w.k8s_pod, "vllm-7d9f-x2", "pod");
	ASSERT_STREQ(w.k8s_container, "engine", "container");
	ASSERT_TRUE(workload_in_pod(&w), "in a pod");

	ASSERT_OK(container_workload(huge_path, 11, &dirs, &w), "CRI-O pod");
	ASSERT_STREQ(w.k8s_pod, "sglang-0", "pod");
	ASSERT_STREQ(w.k8s_namespace, "serving", "namespace");

	ASSERT_OK(container_workload(huge_path, 14, &dirs, &w), "plain container");
	ASSERT_STREQ(w.container_id,
		     "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999", "its id");
	ASSERT_FALSE(workload_in_pod(&w), "in no pod");
	ASSERT_STREQ(w.k8s_namespace, "", "no names");

	ASSERT_OK(container_workload(huge_path, 13, &dirs, &w), "host process");
	ASSERT_STREQ(w.container_id, "", "no container");
	ASSERT_EQ(container_workload(huge_path, 99, &dirs, &w), -ESRCH, "a process gone");

	/* A pod whose bundle is in another containerd namespace is found there too. */
	put("containerd/io.containerd.runtime.v2.task/default/" ID_B "/config.json",
	    containerd_config);
	memset(&w, 0, sizeof(w));
	ASSERT_TRUE(container_bundle(&dirs, ID_B, &w), "another namespace");
	/* A pod whose runtime state is not at hand keeps its cgroup's facts. */
	container_dirs_init(&dirs, NULL, 0);
	ASSERT_OK(container_workload(huge_path, 10, &dirs, &w), "no state given");
	ASSERT_STREQ(w.pod_uid, UID, "the UID from the cgroup path");
	ASSERT_STREQ(w.k8s_pod, "", "no name guessed");
	ASSERT_TRUE(workload_in_pod(&w), "still in a pod");

	/* A config.json larger than CONTAINER_BUNDLE_MAX is not read (never a part of it). */
	container_dirs_init(&dirs, given, 1);
	huge = malloc(CONTAINER_BUNDLE_MAX + 2);
	if (ASSERT_OK_PTR(huge, "malloc")) {
		snprintf(huge_path, sizeof(huge_path),
			 "%s/containerd/io.containerd.runtime.v2.task/k8s.io/" ID_A "/config.json",
			 root);
		f = fopen(huge_path, "w");
		if (ASSERT_OK_PTR(f, "open")) {
			fputs(containerd_config, f);
			memset(huge, ' ', CONTAINER_BUNDLE_MAX + 1);
			fwrite(huge, 1, CONTAINER_BUNDLE_MAX + 1, f);
			fclose(f);
		}
		memset(&w, 0, sizeof(w));
		ASSERT_FALSE(container_bundle(&dirs, ID_A, &w), "too large");
		free(huge);
	}
	ASSERT_FALSE(container_bundle(&dirs, "../../etc", &w), "an id is 64 hex digits, no path");

	/* The state directory is another process's: a symbolic link in config.json's place is not
	 * followed, a FIFO there neither blocks nor is read, nor is a directory. */
	snprintf(huge_path, sizeof(huge_path),
		 "%s/containerd/io.containerd.runtime.v2.task/k8s.io/" ID_A "/config.json", root);
	put("elsewhere.json", containerd_config);
	unlink(huge_path);
	snprintf(target, sizeof(target), "%s/elsewhere.json", root);
	if (ASSERT_OK(symlink(target, huge_path), "symlink")) {
		memset(&w, 0, sizeof(w));
		ASSERT_FALSE(container_bundle(&dirs, ID_A, &w), "a symbolic link is not followed");
		ASSERT_STREQ(w.k8s_pod, "", "nothing read through it");
	}
	unlink(huge_path);
	if (ASSERT_OK(mkfifo(huge_path, 0600), "mkfifo")) {
		memset(&w, 0, sizeof(w));
		ASSERT_FALSE(container_bundle(&dirs, ID_A, &w), "a FIFO: not read, not waited on");
	}
	unlink(huge_path);
	if (ASSERT_OK(mkdir(huge_path, 0700), "mkdir")) {
		memset(&w, 0, sizeof(w));
		ASSERT_FALSE(container_bundle(&dirs, ID_A, &w), "a directory");
		rmdir(huge_path);
	}
	nftw(root, rm, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
	return check_run_all();
}
