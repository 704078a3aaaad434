/* SPDX-License-Identifier: MIT */
/*
 * Where a traced process runs, as the node itself tells (docs/kubernetes.md): its container, by
 * the id in its cgroup path, and, in a Kubernetes pod, the pod's UID (also from the cgroup path)
 * and the names the kubelet gave the container runtime (its OCI bundle's annotations). The
 * loader finds it (user/loader/container.c); a process's requests carry it, and so the sinks.
 * Every string is printable text (utf8_clean), "" when not known.
 */
#ifndef TS_WORKLOAD_H
#define TS_WORKLOAD_H

#include <stdbool.h>

#define WORKLOAD_ID_LEN 64    /* hex digits of a full container id */
#define WORKLOAD_SHORT_LEN 12 /* the short id docker and crictl print */
#define WORKLOAD_UID_LEN 36   /* a pod UID: 8-4-4-4-12 hex digits */

struct workload {
	char container_id[WORKLOAD_ID_LEN + 1]; /* "" outside a container */
	char pod_uid[WORKLOAD_UID_LEN + 1];	/* "" outside a pod */
	/* From the runtime's annotations; "" when they could not be read. Kubernetes bounds
	 * namespace and container names to 63 bytes and pod names to 253. */
	char k8s_namespace[64];
	char k8s_pod[254];
	char k8s_container[64];
};

/* In a Kubernetes pod: its UID or its names are known. */
static inline bool workload_in_pod(const struct workload *w)
{
	return w->pod_uid[0] || w->k8s_pod[0];
}

#endif
