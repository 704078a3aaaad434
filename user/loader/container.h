/* SPDX-License-Identifier: MIT */
/*
 * A traced process's workload (pipeline/workload.h) from what the node holds, with no API
 * server: the container id and the pod UID from its cgroup path, and the pod's namespace and
 * name and the container's name from the OCI bundle the container runtime made for it, whose
 * config.json carries the annotations the kubelet's CRI call set (docs/kubernetes.md):
 *   containerd  STATE/io.containerd.runtime.v2.task/NAMESPACE/ID/config.json (the CRI plugin's
 *               namespace is k8s.io; the others are tried too), annotations
 *               io.kubernetes.cri.sandbox-namespace, -sandbox-name, -sandbox-uid,
 *               -container-name;
 *   CRI-O       STORAGE/overlay-containers/ID/userdata/config.json, annotations
 *               io.kubernetes.pod.namespace, .pod.name, .pod.uid, io.kubernetes.container.name.
 * The directories searched: those given (--container-state), then /run/containerd and
 * /run/containers/storage, each also under /proc/1/root (the node's root, from a container in
 * the node's pid namespace: the DaemonSet). Pod UIDs in cgroup paths: systemd's driver
 * `kubepods-burstable-pod<UID with _>.slice`, cgroupfs's `/kubepods/burstable/pod<UID>/`.
 */
#ifndef TS_LOADER_CONTAINER_H
#define TS_LOADER_CONTAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/workload.h"

/* Directories searched at most: those given, then the four defaults. */
#define CONTAINER_DIRS_MAX 12
/* The largest config.json read (a bundle's spec with its environment and mounts). */
#define CONTAINER_BUNDLE_MAX (1u << 20)

struct container_dirs {
	const char *dir[CONTAINER_DIRS_MAX];
	size_t n;
};

/* The dirs given (n of them, at most CONTAINER_DIRS_MAX - 4 kept) followed by the defaults. */
void container_dirs_init(struct container_dirs *d, const char *const *given, size_t n);
/* The deepest pod UID in /proc/PID/cgroup's text, into uid (WORKLOAD_UID_LEN + 1 bytes). */
bool container_pod_uid(const char *cgroup, char *uid);
/* The Kubernetes names in a bundle's config.json (n bytes), into w (its pod UID only if w has
 * none); false when it has none (not a pod's container). */
bool container_annotations(const char *json, size_t n, struct workload *w);
/* The workload of the container id (with pod UID from cgroup, or NULL) under dirs: fills w.
 * Returns true when a bundle was read. */
bool container_bundle(const struct container_dirs *dirs, const char *id, struct workload *w);
/* The workload of process pid under proc_root ("/proc"): 0, or -ESRCH when it is gone. */
int container_workload(const char *proc_root, uint32_t pid, const struct container_dirs *dirs,
		       struct workload *w);

#endif
