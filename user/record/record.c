// SPDX-License-Identifier: MIT
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/utf8.h"
#include "pipeline/device_sample.h"
#include "pipeline/workload.h"
#include "record/record.h"

_Static_assert(sizeof(struct record_kstats_event) == 24, "record_kstats_event layout");

/* Header field offsets (the table in record.h). */
enum {
	HDR_MAGIC = 0,
	HDR_VERSION = 8,
	HDR_LENGTH = 12,
	HDR_START_MONO = 16,
	HDR_START_REAL = 24,
	HDR_CAPTURE = 32,
	HDR_NROOTS = 36,
	HDR_TOOL_VERSION = 40,
	HDR_HOSTNAME = HDR_TOOL_VERSION + RECORD_TOOL_VERSION_BYTES,
	HDR_ROOTS = HDR_HOSTNAME + RECORD_HOST_BYTES,
	HDR_FLAGS = HDR_ROOTS + 4 * RECORD_MAX_ROOTS,
	HDR_END = HDR_FLAGS + 8,
	/* magic, version and length: enough to tell what the file is */
	HDR_PREFIX = 16,
};
_Static_assert(HDR_END == RECORD_HEADER_BYTES, "header layout");

/* Bytes of the length before each record. */
#define REC_LEN_BYTES 4
/* stdio buffer of the reader: large sequential reads. */
#define REPLAY_BUF_BYTES (1 << 20)

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint32_t get_le32(const unsigned char *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const unsigned char *p)
{
	return get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void record_meta_fill(struct record_meta *m, const char *tool_version)
{
	/* Everything else zero: no root, no capture size until the caller says them. */
	memset(m, 0, sizeof(*m));
	/* Read back to back: the pair maps kernel times to wall time within a few microseconds. */
	m->start_mono_ns = clock_ns(CLOCK_MONOTONIC);
	m->start_real_ns = clock_ns(CLOCK_REALTIME);
	snprintf(m->tool_version, sizeof(m->tool_version), "%s", tool_version ? tool_version : "");
	if (gethostname(m->hostname, sizeof(m->hostname)))
		m->hostname[0] = 0;
	m->hostname[sizeof(m->hostname) - 1] = 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const unsigned char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= w;
	}
	return 0;
}

int record_flush(struct record_writer *w)
{
	int err;

	if (w->fd < 0)
		return -EBADF;
	if (w->err)
		return w->err;
	err = write_all(w->fd, w->buf, w->used);
	w->used = 0;
	/* A failed write leaves the file's end unknown: refuse to append records after a hole. */
	if (err)
		w->err = err;
	return err;
}

/*
 * The tracer's own open descriptor that path names (/dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N: a shell's redirection or process substitution), or -1. Those names are
 * symbolic links, and the only ones -o follows: they lead where the user already writes.
 */
static int own_fd_name(const char *path)
{
	static const char *const dirs[] = { "/dev/fd/", "/proc/self/fd/" };
	char *end;
	long fd;

	if (!strcmp(path, "/dev/stdout"))
		return STDOUT_FILENO;
	if (!strcmp(path, "/dev/stderr"))
		return STDERR_FILENO;
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		size_t n = strlen(dirs[i]);

		if (strncmp(path, dirs[i], n) || path[n] < '0' || path[n] > '9')
			continue;
		errno = 0;
		fd = strtol(path + n, &end, 10);
		if (!errno && !*end && fd <= INT32_MAX)
			return fd;
	}
	return -1;
}

/*
 * Opens where a recording goes, or returns a negative errno. A recorder often runs as root
 * and may be pointed into a directory others can write to (/tmp): a symbolic link planted at
 * path is refused (-ELOOP) instead of truncating the file it points to, and an existing
 * regular file must be this user's (-EEXIST: another user could read the recording) with no
 * other hard link (-EMLINK). FIFOs and character devices (/dev/null) are written as before;
 * not O_EXCL, so a recording can be made again under the same name.
 */
static int record_open_target(const char *path)
{
	struct stat st;
	int fd = own_fd_name(path), fl, err;

	if (fd >= 0) {
		fl = fcntl(fd, F_GETFL);
		if (fl < 0)
			return -errno;
		if ((fl & O_ACCMODE) == O_RDONLY)
			return -EBADF;
		fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : fd;
	}
	/* 0600: data records hold captured request and response bytes, prompts included (the
	 * plaintext of TLS connections too).
	 * Truncated only once known to be a file of ours. */
	fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		err = -errno;
		goto fail;
	}
	if (S_ISREG(st.st_mode)) {
		err = st.st_uid != geteuid() ? -EEXIST : st.st_nlink > 1 ? -EMLINK : 0;
		if (!err && (ftruncate(fd, 0) || fchmod(fd, 0600)))
			err = -errno;
		if (err)
			goto fail;
	}
	return fd;
fail:
	close(fd);
	return err;
}

int record_open(struct record_writer *w, const char *path, const struct record_meta *meta)
{
	unsigned char *h;
	size_t n;
	int err;

	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->buf = malloc(RECORD_BUF_BYTES);
	if (!w->buf)
		return -ENOMEM;
	err = record_open_target(path);
	if (err < 0) {
		free(w->buf);
		w->buf = NULL;
		return err;
	}
	w->fd = err;
	h = w->buf;
	memset(h, 0, RECORD_HEADER_BYTES);
	memcpy(h + HDR_MAGIC, RECORD_MAGIC, RECORD_MAGIC_BYTES);
	put_le32(h + HDR_VERSION, RECORD_VERSION);
	put_le32(h + HDR_LENGTH, RECORD_HEADER_BYTES);
	put_le64(h + HDR_START_MONO, meta->start_mono_ns);
	put_le64(h + HDR_START_REAL, meta->start_real_ns);
	put_le32(h + HDR_CAPTURE, meta->capture_bytes);
	n = meta->nroots < RECORD_MAX_ROOTS ? meta->nroots : RECORD_MAX_ROOTS;
	put_le32(h + HDR_NROOTS, n);
	/* NUL-padded, not necessarily terminated: the header is already zeroed. */
	memcpy(h + HDR_TOOL_VERSION, meta->tool_version,
	       strnlen(meta->tool_version, RECORD_TOOL_VERSION_BYTES));
	memcpy(h + HDR_HOSTNAME, meta->hostname, strnlen(meta->hostname, RECORD_HOST_BYTES));
	for (size_t i = 0; i < n; i++)
		put_le32(h + HDR_ROOTS + 4 * i, meta->roots[i]);
	w->used = RECORD_HEADER_BYTES;
	w->bytes = RECORD_HEADER_BYTES;
	/* On disk at once: even a recorder killed before its first drain leaves a valid file. */
	err = record_flush(w);
	if (err)
		record_close(w);
	return err;
}

int record_write(struct record_writer *w, const void *rec, size_t len)
{
	struct ts_event_hdr hdr;
	unsigned char lenb[REC_LEN_BYTES];
	int err;

	if (w->fd < 0)
		return -EBADF;
	if (w->err)
		return w->err;
	if (len < sizeof(hdr) || len > RECORD_MAX_BYTES)
		goto bad;
	memcpy(&hdr, rec, sizeof(hdr));
	if (hdr.size != len)
		goto bad;
	put_le32(lenb, len);
	if (w->used + sizeof(lenb) + len > RECORD_BUF_BYTES) {
		err = record_flush(w);
		if (err)
			return err;
	}
	if (sizeof(lenb) + len > RECORD_BUF_BYTES) {
		/* Larger than the buffer: straight to the file (the buffer is empty now). */
		err = write_all(w->fd, lenb, sizeof(lenb));
		if (!err)
			err = write_all(w->fd, rec, len);
		if (err) {
			w->err = err;
			return err;
		}
	} else {
		memcpy(w->buf + w->used, lenb, sizeof(lenb));
		memcpy(w->buf + w->used + sizeof(lenb), rec, len);
		w->used += sizeof(lenb) + len;
	}
	w->records++;
	w->bytes += sizeof(lenb) + len;
	return 0;
bad:
	/* A record no reader could frame would end every replay there: leave it out. */
	w->rejected++;
	return -EINVAL;
}

int record_write_kstats(struct record_writer *w, const uint64_t kstats[TS_STAT_MAX])
{
	unsigned char buf[sizeof(struct record_kstats_event) + TS_STAT_MAX * sizeof(__u64)]
	    __attribute__((aligned(8)));
	struct record_kstats_event *e = (struct record_kstats_event *)buf;
	int err;

	if (w->kstats_written && !memcmp(w->kstats, kstats, sizeof(w->kstats)))
		return 0;
	memset(buf, 0, sizeof(buf));
	e->hdr.type = RECORD_EV_KSTATS;
	e->hdr.size = sizeof(buf);
	e->nstats = TS_STAT_MAX;
	memcpy(e->stats, kstats, TS_STAT_MAX * sizeof(__u64));
	err = record_write(w, buf, sizeof(buf));
	if (err)
		return err;
	memcpy(w->kstats, kstats, sizeof(w->kstats));
	w->kstats_written = true;
	return 0;
}

int record_write_device_sample(struct record_writer *w, const struct device_sample *s)
{
	size_t len = sizeof(struct record_sample_event);
	unsigned char *buf, *p;
	struct record_sample_event *e;
	uint32_t nd = s->ndevices < DEV_MAX_DEVICES ? s->ndevices : DEV_MAX_DEVICES;
	int err;

	for (uint32_t i = 0; i < nd; i++)
		len +=
		    sizeof(struct record_sample_device) +
		    (s->devices[i].nprocs < DEV_MAX_PROCS ? s->devices[i].nprocs : DEV_MAX_PROCS) *
			sizeof(struct record_sample_proc);
	buf = calloc(1, len);
	if (!buf)
		return -ENOMEM;
	e = (struct record_sample_event *)buf;
	e->hdr.type = RECORD_EV_DEVICE_SAMPLE;
	e->hdr.size = (__u32)len;
	e->seq = s->seq;
	e->ndevices = nd;
	e->devices_dropped = s->devices_dropped;
	p = buf + sizeof(*e);
	for (uint32_t i = 0; i < nd; i++) {
		const struct sampled_device *d = &s->devices[i];
		struct record_sample_device *rd = (struct record_sample_device *)p;
		uint32_t np = d->nprocs < DEV_MAX_PROCS ? d->nprocs : DEV_MAX_PROCS;

		rd->index = d->index;
		rd->flags = (d->util_present ? RECORD_SAMPLE_UTIL : 0) |
			    (d->mem_present ? RECORD_SAMPLE_MEM : 0) |
			    (d->clock_present ? RECORD_SAMPLE_CLOCK : 0) |
			    (d->power_present ? RECORD_SAMPLE_POWER : 0) |
			    (d->procs_present ? RECORD_SAMPLE_PROCS : 0);
		rd->util_pct = d->util_pct;
		rd->power_mw = d->power_mw;
		rd->mono_ns = d->mono_ns;
		rd->mem_used = d->mem_used;
		rd->mem_total = d->mem_total;
		rd->sm_clock_hz = d->sm_clock_hz;
		rd->nprocs = np;
		rd->procs_dropped = d->procs_dropped;
		memcpy(rd->name, d->name, strnlen(d->name, sizeof(d->name)));
		memcpy(rd->uuid, d->uuid, strnlen(d->uuid, sizeof(d->uuid)));
		p += sizeof(*rd);
		for (uint32_t j = 0; j < np; j++, p += sizeof(struct record_sample_proc))
			*(struct record_sample_proc *)p =
			    (struct record_sample_proc){ .pid = d->procs[j].pid,
							 .mem_present = d->procs[j].mem_present,
							 .mem_bytes = d->procs[j].mem_bytes };
	}
	err = record_write(w, buf, len);
	free(buf);
	return err;
}

/* A NUL-padded field from a string (cut to fit). */
#define PUT_STR(field, str) snprintf(field, sizeof(field), "%s", str)
/* A field's string into dst (cap bytes), printable. */
#define GET_STR(dst, field) utf8_clean(dst, sizeof(dst), field, strnlen(field, sizeof(field)))

int record_write_workload(struct record_writer *w, uint32_t pid, uint64_t ts_ns,
			  const struct workload *wl)
{
	struct record_workload_event e = {
		.hdr = { .type = RECORD_EV_WORKLOAD, .size = sizeof(e), .pid = pid, .tid = pid },
		.ts_ns = ts_ns,
	};

	PUT_STR(e.container_id, wl->container_id);
	PUT_STR(e.pod_uid, wl->pod_uid);
	PUT_STR(e.k8s_namespace, wl->k8s_namespace);
	PUT_STR(e.k8s_pod, wl->k8s_pod);
	PUT_STR(e.k8s_container, wl->k8s_container);
	return record_write(w, &e, sizeof(e));
}

int record_workload(const void *rec, size_t len, uint32_t *pid, struct workload *wl)
{
	const struct record_workload_event *e = rec;

	if (len != sizeof(*e) || e->hdr.type != RECORD_EV_WORKLOAD || e->hdr.size != len)
		return -EINVAL;
	memset(wl, 0, sizeof(*wl));
	*pid = e->hdr.pid;
	GET_STR(wl->container_id, e->container_id);
	GET_STR(wl->pod_uid, e->pod_uid);
	GET_STR(wl->k8s_namespace, e->k8s_namespace);
	GET_STR(wl->k8s_pod, e->k8s_pod);
	GET_STR(wl->k8s_container, e->k8s_container);
	return 0;
}

int record_device_sample(const void *rec, size_t len, struct device_sample *s)
{
	const struct record_sample_event *e = rec;
	const unsigned char *p = rec, *end = p + len;

	if (len < sizeof(*e) || e->hdr.type != RECORD_EV_DEVICE_SAMPLE || e->hdr.size != len ||
	    e->ndevices > DEV_MAX_DEVICES)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->seq = e->seq;
	s->ndevices = e->ndevices;
	s->devices_dropped = e->devices_dropped;
	p += sizeof(*e);
	for (uint32_t i = 0; i < e->ndevices; i++) {
		struct record_sample_device rd;
		struct sampled_device *d = &s->devices[i];

		if ((size_t)(end - p) < sizeof(rd))
			return -EINVAL;
		memcpy(&rd, p, sizeof(rd));
		p += sizeof(rd);
		if (rd.nprocs > DEV_MAX_PROCS ||
		    (size_t)(end - p) < rd.nprocs * sizeof(struct record_sample_proc))
			return -EINVAL;
		d->index = rd.index;
		d->util_present = rd.flags & RECORD_SAMPLE_UTIL;
		d->mem_present = rd.flags & RECORD_SAMPLE_MEM;
		d->clock_present = rd.flags & RECORD_SAMPLE_CLOCK;
		d->power_present = rd.flags & RECORD_SAMPLE_POWER;
		d->procs_present = rd.flags & RECORD_SAMPLE_PROCS;
		d->util_pct = rd.util_pct;
		d->power_mw = rd.power_mw;
		d->mono_ns = rd.mono_ns;
		d->mem_used = rd.mem_used;
		d->mem_total = rd.mem_total;
		d->sm_clock_hz = rd.sm_clock_hz;
		d->nprocs = rd.nprocs;
		d->procs_dropped = rd.procs_dropped;
		utf8_clean(d->name, sizeof(d->name), rd.name, strnlen(rd.name, sizeof(rd.name)));
		utf8_clean(d->uuid, sizeof(d->uuid), rd.uuid, strnlen(rd.uuid, sizeof(rd.uuid)));
		for (uint32_t j = 0; j < rd.nprocs; j++, p += sizeof(struct record_sample_proc)) {
			struct record_sample_proc rp;

			memcpy(&rp, p, sizeof(rp));
			d->procs[j] = (struct sampled_proc){ .pid = rp.pid,
							     .mem_present = rp.mem_present != 0,
							     .mem_bytes = rp.mem_bytes };
		}
	}
	return p == end ? 0 : -EINVAL;
}

int record_close(struct record_writer *w)
{
	int err = 0;

	/* buf is the mark of an open writer: a zeroed one has fd 0, which is not ours. */
	if (w->buf && w->fd >= 0) {
		err = record_flush(w);
		/* Pipes and character devices cannot be synced; that is no error for a recording.
		 */
		if (fsync(w->fd) && errno != EINVAL && errno != EROFS && !err)
			err = -errno;
		if (close(w->fd) && !err)
			err = -errno;
		w->fd = -1;
	}
	free(w->buf);
	w->buf = NULL;
	return err;
}

int record_write_drain(struct record_writer *w, uint64_t clock_ns)
{
	struct record_drain_event e = { .hdr = { RECORD_EV_DRAIN, sizeof(e), 0, 0 },
					.clock_ns = clock_ns };

	return record_write(w, &e, sizeof(e));
}

int record_drain(const void *rec, size_t len, uint64_t *clock_ns)
{
	const struct record_drain_event *e = rec;

	if (len != sizeof(*e) || e->hdr.type != RECORD_EV_DRAIN || e->hdr.size != len)
		return -EINVAL;
	*clock_ns = e->clock_ns;
	return 0;
}

const struct record_kstats_event *record_kstats(const void *rec, size_t len)
{
	const struct record_kstats_event *e = rec;

	if (len < sizeof(*e) || e->hdr.type != RECORD_EV_KSTATS || e->hdr.size != len ||
	    (len - sizeof(*e)) / sizeof(__u64) != e->nstats || (len - sizeof(*e)) % sizeof(__u64))
		return NULL;
	return e;
}

/* Sets the reason and offset of an early stop; returns err. */
static int stop(struct record_replay_stats *st, int err, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int stop(struct record_replay_stats *st, int err, uint64_t offset, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(st->reason, sizeof(st->reason), fmt, ap);
	va_end(ap);
	st->bad_offset = offset;
	return err;
}

/* Reads n bytes; returns the count read (< n at end of file) or a negative errno. */
static long read_some(FILE *f, void *p, size_t n)
{
	size_t got;

	errno = 0;
	got = fread(p, 1, n, f);
	if (got < n && ferror(f))
		return errno ? -errno : -EIO;
	return got;
}

/* The fields of a header whose length and root count were checked. A recording may come from
 * anyone: its clocks must leave wall-time arithmetic in range, its root pids be pids, and its
 * strings are made printable. */
static int read_meta(const unsigned char *h, struct record_meta *m, struct record_replay_stats *st)
{
	memset(m, 0, sizeof(*m));
	m->start_mono_ns = get_le64(h + HDR_START_MONO);
	m->start_real_ns = get_le64(h + HDR_START_REAL);
	if (m->start_mono_ns > RECORD_CLOCK_MAX_NS)
		return stop(st, -EBADMSG, HDR_START_MONO,
			    "corrupt header: monotonic clock at %" PRIu64
			    " ns, past 2^62 (146 years of uptime)",
			    m->start_mono_ns);
	if (m->start_real_ns > RECORD_CLOCK_MAX_NS)
		return stop(st, -EBADMSG, HDR_START_REAL,
			    "corrupt header: wall clock at %" PRIu64
			    " ns since 1970, past 2^62 (the year 2116)",
			    m->start_real_ns);
	m->real_offset_ns = (int64_t)m->start_real_ns - (int64_t)m->start_mono_ns;
	m->capture_bytes = get_le32(h + HDR_CAPTURE);
	if (m->capture_bytes > TS_CAPTURE_MAX)
		return stop(st, -EBADMSG, HDR_CAPTURE,
			    "corrupt header: capture limit %u bytes (at most %d)", m->capture_bytes,
			    TS_CAPTURE_MAX);
	m->nroots = get_le32(h + HDR_NROOTS);
	for (uint32_t i = 0; i < m->nroots; i++) {
		m->roots[i] = get_le32(h + HDR_ROOTS + 4 * i);
		if (!m->roots[i] || m->roots[i] > RECORD_PID_MAX)
			return stop(st, -EBADMSG, HDR_ROOTS + 4 * i,
				    "corrupt header: root process %u", m->roots[i]);
	}
	utf8_clean(m->tool_version, sizeof(m->tool_version), (const char *)h + HDR_TOOL_VERSION,
		   strnlen((const char *)h + HDR_TOOL_VERSION, RECORD_TOOL_VERSION_BYTES));
	utf8_clean(m->hostname, sizeof(m->hostname), (const char *)h + HDR_HOSTNAME,
		   strnlen((const char *)h + HDR_HOSTNAME, RECORD_HOST_BYTES));
	return 0;
}

static int read_header(FILE *f, struct record_meta *m, struct record_replay_stats *st)
{
	int err;

	unsigned char pre[HDR_PREFIX], *h;
	uint32_t version, len, nroots;
	long n = read_some(f, pre, sizeof(pre));

	if (n < 0)
		return stop(st, n, 0, "read error: %s", strerror(-n));
	if (n == 0)
		return stop(st, -ENOEXEC, 0, "not a tokenscope recording (empty file)");
	if (memcmp(pre, RECORD_MAGIC, n < RECORD_MAGIC_BYTES ? n : RECORD_MAGIC_BYTES))
		return stop(st, -ENOEXEC, 0, "not a tokenscope recording");
	if (n < HDR_PREFIX)
		return stop(st, -EBADMSG, n, "truncated header (%ld of at least %d bytes)", n,
			    HDR_PREFIX);
	version = get_le32(pre + HDR_VERSION);
	len = get_le32(pre + HDR_LENGTH);
	if (version < RECORD_VERSION_OLDEST || version > RECORD_VERSION)
		return stop(st, -EPROTONOSUPPORT, HDR_VERSION,
			    "unsupported version %u (this tokenscope reads versions %d to %d)",
			    version, RECORD_VERSION_OLDEST, RECORD_VERSION);
	if (len < RECORD_HEADER_BYTES || len > RECORD_HEADER_MAX)
		return stop(st, -EBADMSG, HDR_LENGTH, "corrupt header length %u", len);
	h = malloc(len);
	if (!h)
		return stop(st, -ENOMEM, 0, "out of memory");
	memcpy(h, pre, HDR_PREFIX);
	n = read_some(f, h + HDR_PREFIX, len - HDR_PREFIX);
	if (n < 0) {
		free(h);
		return stop(st, n, HDR_PREFIX, "read error: %s", strerror(-n));
	}
	if ((size_t)n < len - HDR_PREFIX) {
		free(h);
		return stop(st, -EBADMSG, HDR_PREFIX + n, "truncated header (%ld of %u bytes)",
			    HDR_PREFIX + n, len);
	}
	nroots = get_le32(h + HDR_NROOTS);
	if (nroots > RECORD_MAX_ROOTS) {
		free(h);
		return stop(st, -EBADMSG, HDR_NROOTS, "corrupt header: %u root processes", nroots);
	}
	err = read_meta(h, m, st);
	free(h);
	if (err)
		return err;
	m->version = version;
	m->header_bytes = len;
	st->bytes = len;
	st->header_ok = true;
	return 0;
}

/*
 * Version 1 data records lack queued_ns (8 bytes after syscall_pos): made into version 2 ones
 * with the arrival unknown. rec has room for 8 more bytes.
 */
#define V1_DATA_BYTES 72
#define V1_QUEUED_AT 56

static uint32_t upgrade_v1(unsigned char *rec, uint32_t len)
{
	struct ts_event_hdr hdr;

	memcpy(&hdr, rec, sizeof(hdr));
	if (hdr.type != TS_EV_DATA || len < V1_DATA_BYTES)
		return len;
	memmove(rec + V1_QUEUED_AT + 8, rec + V1_QUEUED_AT, len - V1_QUEUED_AT);
	memset(rec + V1_QUEUED_AT, 0, 8);
	hdr.size = len + 8;
	memcpy(rec, &hdr, sizeof(hdr));
	return len + 8;
}
_Static_assert(offsetof(struct ts_data_event, queued_ns) == V1_QUEUED_AT, "v1 data layout");
_Static_assert(sizeof(struct ts_data_event) == V1_DATA_BYTES + 8, "v1 data layout");

int record_reader_open(struct record_reader *r, const char *path)
{
	int err;

	memset(r, 0, sizeof(*r));
	r->st.bad_offset = -1;
	r->f = fopen(path, "rbe");
	if (!r->f) {
		err = errno;
		return stop(&r->st, -err, 0, "%s", strerror(err));
	}
	r->iobuf = malloc(REPLAY_BUF_BYTES);
	if (r->iobuf)
		setvbuf(r->f, r->iobuf, _IOFBF, REPLAY_BUF_BYTES);
	return r->err = read_header(r->f, &r->meta, &r->st);
}

int record_next(struct record_reader *r, const void **rec_out, size_t *len_out)
{
	struct record_replay_stats *st = &r->st;
	unsigned char lenb[REC_LEN_BYTES];
	uint64_t off = st->bytes;
	struct ts_event_hdr hdr;
	uint32_t len;
	long n;

	if (!st->header_ok || r->done)
		return r->err;
	r->done = true; /* until a record is returned */
	n = read_some(r->f, lenb, sizeof(lenb));
	if (n < 0)
		return r->err = stop(st, n, off, "read error: %s", strerror(-n));
	if (n == 0)
		return 0;
	if (n < (long)sizeof(lenb))
		return r->err =
			   stop(st, -EPROTO, off, "truncated record (%ld of 4 length bytes)", n);
	len = get_le32(lenb);
	if (len < sizeof(hdr) || len > RECORD_MAX_BYTES)
		return r->err = stop(st, -EBADMSG, off, "corrupt record length %u", len);
	if (len + 8 > r->cap) {
		/* Grows to the largest record seen (and room to upgrade a version 1 one). */
		unsigned char *p = realloc(r->rec, len + 8);

		if (!p)
			return r->err = stop(st, -ENOMEM, off, "out of memory");
		r->rec = p;
		r->cap = len + 8;
	}
	n = read_some(r->f, r->rec, len);
	if (n < 0)
		return r->err = stop(st, n, off, "read error: %s", strerror(-n));
	if ((size_t)n < len)
		return r->err =
			   stop(st, -EPROTO, off, "truncated record (%ld of %u bytes)", n, len);
	memcpy(&hdr, r->rec, sizeof(hdr));
	if (hdr.size != len)
		return r->err = stop(st, -EBADMSG, off,
				     "corrupt record: length %u but its header says %u bytes", len,
				     hdr.size);
	st->bytes = off + sizeof(lenb) + len;
	if (r->meta.version == 1)
		len = upgrade_v1(r->rec, len);
	st->records++;
	r->done = false;
	*rec_out = r->rec;
	*len_out = len;
	return 1;
}

void record_reader_close(struct record_reader *r)
{
	if (r->f)
		fclose(r->f);
	free(r->iobuf);
	free(r->rec);
	r->f = NULL;
	r->iobuf = NULL;
	r->rec = NULL;
}

int record_replay(const char *path, int (*feed)(void *ctx, const void *rec, size_t len), void *ctx,
		  struct record_meta *meta_out, struct record_replay_stats *st)
{
	struct record_reader r;
	const void *rec;
	size_t len;
	int err = record_reader_open(&r, path);

	if (!err && meta_out)
		*meta_out = r.meta;
	while (!err && (err = record_next(&r, &rec, &len)) > 0) {
		err = 0;
		if (feed(ctx, rec, len) < 0)
			r.st.rejected++;
	}
	*st = r.st;
	record_reader_close(&r);
	return err;
}
