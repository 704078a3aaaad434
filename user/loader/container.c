// SPDX-License-Identifier: MIT
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/json.h"
#include "lib/utf8.h"
#include "loader/discover.h"
#include "loader/proc.h"
#include "loader/container.h"

#define CGROUP_BYTES 4096

static const char *const default_dirs[] = {
	"/run/containerd",
	"/run/containers/storage",
	"/proc/1/root/run/containerd",
	"/proc/1/root/run/containers/storage",
};
#define NDEFAULT (sizeof(default_dirs) / sizeof(default_dirs[0]))

void container_dirs_init(struct container_dirs *d, const char *const *given, size_t n)
{
	d->n = 0;
	for (size_t i = 0; i < n && d->n < CONTAINER_DIRS_MAX - NDEFAULT; i++)
		d->dir[d->n++] = given[i];
	for (size_t i = 0; i < NDEFAULT; i++)
		d->dir[d->n++] = default_dirs[i];
}

/* A pod UID of 36 bytes at s: hex digits and dashes (8-4-4-4-12), with '_' for '-' under the
 * systemd driver. Checked whole before anything is written: uid is untouched unless the whole
 * UID is one, and then holds it with dashes. */
static bool uid_at(const char *s, size_t n, char *uid)
{
	if (n != WORKLOAD_UID_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;

		/* One separator throughout: '-' (cgroupfs) or '_' (systemd's escaping); a mixture
		 * is no runtime's. */
		if (dash ? (c != '-' && c != '_') || c != s[8]
			 : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	for (size_t i = 0; i < n; i++)
		uid[i] = s[i] == '_' ? '-' : s[i];
	uid[n] = 0;
	return true;
}

/* One path component: `kubepods-...-pod<UID>.slice` (systemd) or `pod<UID>` under kubepods
 * (cgroupfs). */
static bool component_uid(const char *c, size_t n, bool under_kubepods, char *uid)
{
	const char *p;

	if (n > 6 && !strncmp(c + n - 6, ".slice", 6)) {
		if (strncmp(c, "kubepods", 8))
			return false;
		n -= 6;
		for (p = c + n; p > c && p[-1] != '-'; p--)
			;
		return p > c && !strncmp(p, "pod", 3) &&
		       uid_at(p + 3, n - (size_t)(p + 3 - c), uid);
	}
	return under_kubepods && n > 3 && !strncmp(c, "pod", 3) && uid_at(c + 3, n - 3, uid);
}

/* The deepest pod UID of one cgroup path. */
static bool path_uid(const char *path, size_t len, char *uid)
{
	bool found = false, kubepods = false;

	for (const char *c = path, *end = path + len; c < end;) {
		const char *slash = memchr(c, '/', end - c);
		size_t n = (slash ? slash : end) - c;

		if (n && component_uid(c, n, kubepods, uid))
			found = true;
		if (n >= 8 && !strncmp(c, "kubepods", 8))
			kubepods = true;
		c += n + 1;
	}
	return found;
}

static bool uid_in(const char *path, size_t len, void *uid)
{
	return path_uid(path, len, uid);
}

bool container_pod_uid(const char *cgroup, char *uid)
{
	return discover_cgroup_find(cgroup, uid_in, uid);
}

static void take(char *dst, size_t cap, const struct jv *ann, const char *key)
{
	const struct jv *v = jv_get(ann, key);

	if (jv_is_string(v) && v->str[0])
		utf8_clean(dst, cap, v->str, strlen(v->str));
}

bool container_annotations(const char *json, size_t n, struct workload *w)
{
	struct jv_arena a;
	const struct jv *root, *ann, *type, *uid = NULL;

	jv_arena_init(&a, NULL, 0);
	root = jv_parse(&a, json, n);
	ann = jv_get(root, "annotations");
	/* containerd's CRI plugin */
	type = jv_get(ann, "io.kubernetes.cri.container-type");
	if (jv_is_string(jv_get(ann, "io.kubernetes.cri.sandbox-name"))) {
		take(w->k8s_namespace, sizeof(w->k8s_namespace), ann,
		     "io.kubernetes.cri.sandbox-namespace");
		take(w->k8s_pod, sizeof(w->k8s_pod), ann, "io.kubernetes.cri.sandbox-name");
		uid = jv_get(ann, "io.kubernetes.cri.sandbox-uid");
		/* The pod's sandbox (pause) container has no container name. */
		if (!jv_is_string(type) || strcmp(type->str, "sandbox"))
			take(w->k8s_container, sizeof(w->k8s_container), ann,
			     "io.kubernetes.cri.container-name");
	} else if (jv_is_string(jv_get(ann, "io.kubernetes.pod.name"))) { /* CRI-O */
		take(w->k8s_namespace, sizeof(w->k8s_namespace), ann,
		     "io.kubernetes.pod.namespace");
		take(w->k8s_pod, sizeof(w->k8s_pod), ann, "io.kubernetes.pod.name");
		uid = jv_get(ann, "io.kubernetes.pod.uid");
		take(w->k8s_container, sizeof(w->k8s_container), ann,
		     "io.kubernetes.container.name");
	}
	/* The cgroup path's UID is the kernel's word; the annotation only fills a gap, and only
	 * with a whole UID (never one cut to length). */
	if (!w->pod_uid[0] && jv_is_string(uid))
		uid_at(uid->str, strlen(uid->str), w->pod_uid);
	jv_arena_reset(&a);
	return w->k8s_pod[0] != 0;
}

/* The whole file at path, malloc'd and NUL-terminated; NULL when it cannot be read, is not a
 * regular file, or is larger than CONTAINER_BUNDLE_MAX (never a part of it). The state directory
 * is another process's to write: a symbolic link in the file's place is not followed, and a FIFO
 * or device there neither blocks the open nor is read. */
static char *read_whole(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	size_t cap = 0, n = 0;
	char *buf = NULL;
	struct stat st;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > (off_t)CONTAINER_BUNDLE_MAX)
		goto fail;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			size_t ncap = cap ? cap * 2 : 64 * 1024;
			char *b = ncap <= CONTAINER_BUNDLE_MAX ? realloc(buf, ncap) : NULL;

			if (!b)
				goto fail;
			buf = b;
			cap = ncap;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = 0;
	*len = n;
	return buf;
fail:
	close(fd);
	free(buf);
	return NULL;
}

static bool bundle_at(const char *path, struct workload *w)
{
	size_t n = 0;
	char *json = read_whole(path, &n);
	bool ok = json && container_annotations(json, n, w);

	free(json);
	return ok;
}

/* path = the parts joined; false when it would not fit. */
static bool path_of(char *path, size_t cap, const char *fmt, const char *a, const char *b,
		    const char *c)
{
	int n = snprintf(path, cap, fmt, a, b, c);

	return n > 0 && (size_t)n < cap;
}

/* containerd: the CRI plugin's namespace first, then any other. */
static bool containerd_bundle(const char *dir, const char *id, struct workload *w)
{
	char path[4096], tasks[4096];
	struct dirent *e;
	bool ok = false;
	DIR *d;

	if (!path_of(tasks, sizeof(tasks), "%s/%s%s", dir, "io.containerd.runtime.v2.task", ""))
		return false;
	if (path_of(path, sizeof(path), "%s/k8s.io/%s/%s", tasks, id, "config.json") &&
	    bundle_at(path, w))
		return true;
	d = opendir(tasks);
	while (d && !ok && (e = readdir(d))) {
		if (e->d_name[0] == '.' || !strcmp(e->d_name, "k8s.io"))
			continue;
		ok = path_of(path, sizeof(path), "%s/%s/%s/config.json", tasks, e->d_name, id) &&
		     bundle_at(path, w);
	}
	if (d)
		closedir(d);
	return ok;
}

bool container_bundle(const struct container_dirs *dirs, const char *id, struct workload *w)
{
	char path[4096];

	if (strlen(id) != WORKLOAD_ID_LEN || strchr(id, '/'))
		return false;
	for (size_t i = 0; i < dirs->n; i++) {
		if (containerd_bundle(dirs->dir[i], id, w))
			return true;
		if (path_of(path, sizeof(path), "%s/overlay-containers/%s/%s", dirs->dir[i], id,
			    "userdata/config.json") &&
		    bundle_at(path, w))
			return true;
	}
	return false;
}

int container_workload(const char *proc_root, uint32_t pid, const struct container_dirs *dirs,
		       struct workload *w)
{
	char path[512], text[CGROUP_BYTES];
	const char *runtime;

	memset(w, 0, sizeof(*w));
	snprintf(path, sizeof(path), "%s/%u/cgroup", proc_root, pid);
	if (proc_read_file(path, text, sizeof(text)) <= 0)
		return -ESRCH;
	if (!discover_container(text, w->container_id, &runtime))
		return 0;
	container_pod_uid(text, w->pod_uid);
	container_bundle(dirs, w->container_id, w);
	return 0;
}
