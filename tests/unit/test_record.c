// SPDX-License-Identifier: MIT
/*
 * Recordings: records of every type written and replayed byte for byte, the header, files cut
 * at every byte of their last records, garbage, a wrong magic, a future version, corrupt
 * lengths, and a replay through the pipeline that reports exactly what the live feed did.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "pipeline/pipeline_impl.h"
#include "sinks/output.h"
#include "pipeline/device_sample.h"
#include "record/record.h"
#include "record/replay.h"
#include "record/tap.h"
#include "sinks/summary.h"

#define MAX_RECS 64

/* What a replay fed: copies of every record. */
struct sink_recs {
	void *rec[MAX_RECS];
	size_t len[MAX_RECS];
	int n, calls;
	int reject_type; /* feed returns -EINVAL for records of this type */
};

static int collect(void *ctx, const void *rec, size_t len)
{
	struct sink_recs *s = ctx;
	const struct ts_event_hdr *h = rec;

	s->calls++;
	if (s->n < MAX_RECS) {
		s->rec[s->n] = malloc(len);
		memcpy(s->rec[s->n], rec, len);
		s->len[s->n++] = len;
	}
	return s->reject_type && h->type == (uint32_t)s->reject_type ? -EINVAL : 0;
}

static void recs_free(struct sink_recs *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->rec[i]);
	memset(s, 0, sizeof(*s));
}

static char *tmp_path(void)
{
	const char *dir = getenv("TMPDIR");
	char *p;
	int fd;

	if (asprintf(&p, "%s/test_record.XXXXXX", dir && *dir ? dir : "/tmp") < 0)
		return NULL;
	fd = mkstemp(p);
	if (fd < 0) {
		free(p);
		return NULL;
	}
	close(fd);
	return p;
}

static void rm_path(char *p)
{
	if (p)
		unlink(p);
	free(p);
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -errno;
	ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok ? 0 : -EIO;
}

static unsigned char *read_whole(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p;
	long sz;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	p = malloc(sz ? sz : 1);
	*n = fread(p, 1, sz, f);
	fclose(f);
	return p;
}

static void test_meta(struct record_meta *m)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->tool_version, sizeof(m->tool_version), "0.1.0-test");
	snprintf(m->hostname, sizeof(m->hostname), "node-7");
	m->start_mono_ns = 123456789012345ull;
	m->start_real_ns = 1714567890123456789ull;
	m->capture_bytes = 65536;
	m->nroots = 2;
	m->roots[0] = 4242;
	m->roots[1] = 77;
}

/* One record of each type, built as the kernel lays them out; returns the count. */
static int build_all(void *rec[], size_t len[])
{
	static const uint32_t payloads[] = { 0, 1, 287, TS_CHUNK_BYTES };
	int n = 0;

	for (size_t i = 0; i < sizeof(payloads) / sizeof(payloads[0]); i++) {
		size_t sz = sizeof(struct ts_data_event) + payloads[i];
		struct ts_data_event *e = calloc(1, sz);

		e->hdr = (struct ts_event_hdr){ TS_EV_DATA, sz, 100, 101 };
		e->conn_id = 3;
		e->enter_ns = 1000 + i;
		e->exit_ns = 2000 + i;
		e->pos = e->syscall_pos = 10 * i;
		e->syscall_bytes = e->data_bytes = payloads[i];
		e->fd = 9;
		e->dir = i & 1;
		e->syscall = TS_SYS_WRITE;
		e->last = 1;
		for (uint32_t b = 0; b < payloads[i]; b++)
			e->data[b] = b * 7 + i;
		rec[n] = e, len[n++] = sz;
	}
	for (uint32_t t = TS_EV_CONN_OPEN; t <= TS_EV_CONN_CLOSE; t++) {
		struct ts_conn_event *e = calloc(1, sizeof(*e));

		e->hdr = (struct ts_event_hdr){ t, sizeof(*e), 100, 100 };
		e->conn_id = 3;
		e->ts_ns = 900;
		e->family = 10;
		e->local_port = 8000;
		e->peer_port = 51234;
		e->peer_addr[15] = 1;
		e->rx_bytes = 4096;
		e->tx_bytes = 81920;
		rec[n] = e, len[n++] = sizeof(*e);
	}
	for (uint32_t t = TS_EV_PROC_FORK; t <= TS_EV_PROC_EXIT; t++) {
		struct ts_proc_event *e = calloc(1, sizeof(*e));

		e->hdr = (struct ts_event_hdr){ t, sizeof(*e), 200, 200 };
		e->ts_ns = 5000;
		e->ppid = 100;
		e->exit_code = 9;
		memcpy(e->comm, "python3", 7);
		rec[n] = e, len[n++] = sizeof(*e);
	}
	{
		struct ts_gpu_step_event *e = calloc(1, sizeof(*e));

		e->hdr = (struct ts_event_hdr){ TS_EV_GPU_STEP, sizeof(*e), 300, 301 };
		e->start_ns = 6000;
		e->wait_start_ns = 6500;
		e->end_ns = 7000;
		e->launches = 40;
		e->graph_launches = 1;
		e->memcpys = 2;
		e->memcpys_dtoh = 1;
		e->waits = 1;
		rec[n] = e, len[n++] = sizeof(*e);
	}
	{
		struct ts_gpu_call_event *e = calloc(1, sizeof(*e));

		e->hdr = (struct ts_event_hdr){ TS_EV_GPU_CALL, sizeof(*e), 300, 301 };
		e->ts_ns = 6100;
		e->fn = TS_CUDA_MEMCPY;
		e->kind = 2;
		rec[n] = e, len[n++] = sizeof(*e);
	}
	return n;
}

static void free_all(void *rec[], int n)
{
	for (int i = 0; i < n; i++)
		free(rec[i]);
}

TEST(test_round_trip_every_type)
{
	void *rec[16];
	size_t len[16];
	int n = build_all(rec, len);
	uint64_t kstats[TS_STAT_MAX] = { 0 };
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	char *path = tmp_path();
	int err;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	if (!ASSERT_OK(record_open(&w, path, &m), "open"))
		goto out;
	for (int i = 0; i < n; i++)
		ASSERT_OK(record_write(&w, rec[i], len[i]), "write");
	kstats[TS_STAT_LOST_EVENTS] = 3;
	kstats[TS_STAT_UNCAPTURED_BYTES] = 99;
	ASSERT_OK(record_write_kstats(&w, kstats), "kstats");
	ASSERT_OK(record_write_kstats(&w, kstats), "kstats unchanged: not written again");
	ASSERT_EQ(w.records, n + 1, "records written");
	ASSERT_OK(record_close(&w), "close");

	err = record_replay(path, collect, &got, NULL, &st);
	ASSERT_EQ(err, 0, "whole file");
	ASSERT_TRUE(st.header_ok, "header ok");
	ASSERT_EQ(st.bad_offset, -1, "no bad offset");
	ASSERT_STREQ(st.reason, "", "no reason");
	ASSERT_EQ(st.records, n + 1, "records fed");
	ASSERT_EQ(got.n, n + 1, "records collected");
	for (int i = 0; i < n && i < got.n; i++) {
		ASSERT_EQ(got.len[i], len[i], "length");
		ASSERT_TRUE(got.len[i] == len[i] && !memcmp(got.rec[i], rec[i], len[i]),
			    "byte-identical");
	}
	if (got.n == n + 1) {
		const struct record_kstats_event *ks = record_kstats(got.rec[n], got.len[n]);

		if (ASSERT_OK_PTR(ks, "kernel counters record")) {
			ASSERT_EQ(ks->nstats, TS_STAT_MAX, "counter count");
			ASSERT_EQ(ks->stats[TS_STAT_LOST_EVENTS], 3, "lost events");
			ASSERT_EQ(ks->stats[TS_STAT_UNCAPTURED_BYTES], 99, "uncaptured");
		}
		ASSERT_TRUE(record_kstats(rec[0], len[0]) == NULL, "a data record is not one");
	}
out:
	recs_free(&got);
	free_all(rec, n);
	rm_path(path);
}

/* The reader: the header before any record, the records one by one, and an error that stays. */
TEST(test_reader)
{
	void *rec[16];
	size_t len[16];
	int n = build_all(rec, len);
	struct record_writer w;
	struct record_meta m;
	struct record_reader r;
	char *path = tmp_path();
	const void *got;
	size_t got_len;
	int k = 0, rc;

	if (!ASSERT_OK_PTR(path, "temp file"))
		goto out;
	test_meta(&m);
	if (!ASSERT_OK(record_open(&w, path, &m), "open"))
		goto out;
	for (int i = 0; i < n; i++)
		record_write(&w, rec[i], len[i]);
	ASSERT_OK(record_close(&w), "close");
	if (!ASSERT_OK(record_reader_open(&r, path), "reader"))
		goto out;
	ASSERT_TRUE(r.st.header_ok, "header read at open");
	ASSERT_EQ(r.st.records, 0, "no record read yet");
	ASSERT_EQ(r.meta.start_mono_ns, m.start_mono_ns, "clocks known before the records");
	ASSERT_STREQ(r.meta.hostname, m.hostname, "host known before the records");
	while ((rc = record_next(&r, &got, &got_len)) > 0 && k < n) {
		ASSERT_TRUE(got_len == len[k] && !memcmp(got, rec[k], len[k]), "record in order");
		k++;
	}
	ASSERT_EQ(rc, 0, "the end of a whole file");
	ASSERT_EQ(k, n, "every record");
	ASSERT_EQ(record_next(&r, &got, &got_len), 0, "still the end");
	record_reader_close(&r);
	record_reader_close(&r);

	/* A corrupt length after the first record: the error, at every call after. */
	int fd = open(path, O_WRONLY | O_APPEND);
	unsigned char junk[4] = { 1, 0, 0, 0 };

	if (ASSERT_TRUE(fd >= 0, "append") && ASSERT_EQ(write(fd, junk, 4), 4, "junk length"))
		close(fd);
	if (!ASSERT_OK(record_reader_open(&r, path), "reader again"))
		goto out;
	for (k = 0; (rc = record_next(&r, &got, &got_len)) > 0; k++)
		;
	ASSERT_EQ(rc, -EBADMSG, "corrupt record length");
	ASSERT_EQ(k, n, "the records before it");
	ASSERT_EQ(record_next(&r, &got, &got_len), -EBADMSG, "the error stays");
	ASSERT_TRUE(strstr(r.st.reason, "corrupt record length 1") != NULL, "reason");
	record_reader_close(&r);

	/* Not a recording: refused at open, and no record after. */
	write_file(path, "hello", 5);
	ASSERT_EQ(record_reader_open(&r, path), -ENOEXEC, "not a recording");
	ASSERT_FALSE(r.st.header_ok, "no header");
	ASSERT_EQ(record_next(&r, &got, &got_len), -ENOEXEC, "nothing to read");
	record_reader_close(&r);
out:
	free_all(rec, n);
	rm_path(path);
}

/* Records larger than the write buffer, and enough of them to fill it many times. */
TEST(test_round_trip_large)
{
	size_t big = RECORD_MAX_BYTES;
	struct ts_data_event *e = calloc(1, big);
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	char *path = tmp_path();
	size_t sizes[] = { big, 100, RECORD_BUF_BYTES - 4, RECORD_BUF_BYTES - 3, 5000, big };
	int nsizes = sizeof(sizes) / sizeof(sizes[0]);

	if (!ASSERT_OK_PTR(path, "temp file"))
		goto out;
	for (size_t b = 0; b < big - sizeof(*e); b++)
		e->data[b] = b ^ (b >> 8);
	test_meta(&m);
	if (!ASSERT_OK(record_open(&w, path, &m), "open"))
		goto out;
	for (int i = 0; i < nsizes; i++) {
		e->hdr = (struct ts_event_hdr){ TS_EV_DATA, sizes[i], 1, 1 };
		e->data_bytes = sizes[i] - sizeof(*e);
		e->pos = i;
		ASSERT_OK(record_write(&w, e, sizes[i]), "write");
	}
	ASSERT_OK(record_close(&w), "close");
	ASSERT_OK(record_close(&w), "a second close is harmless");
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), 0, "whole");
	if (ASSERT_EQ(got.n, nsizes, "records")) {
		for (int i = 0; i < nsizes; i++) {
			e->hdr = (struct ts_event_hdr){ TS_EV_DATA, sizes[i], 1, 1 };
			e->data_bytes = sizes[i] - sizeof(*e);
			e->pos = i;
			ASSERT_TRUE(got.len[i] == sizes[i] && !memcmp(got.rec[i], e, sizes[i]),
				    "byte-identical");
		}
	}
out:
	recs_free(&got);
	free(e);
	rm_path(path);
}

TEST(test_header_round_trip)
{
	struct record_writer w;
	struct record_meta m, back;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	char *path = tmp_path();

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	/* The longest strings the header holds, and every root slot. */
	memset(m.hostname, 'h', RECORD_HOST_BYTES);
	m.hostname[RECORD_HOST_BYTES] = 0;
	memset(m.tool_version, 'v', RECORD_TOOL_VERSION_BYTES);
	m.tool_version[RECORD_TOOL_VERSION_BYTES] = 0;
	m.nroots = RECORD_MAX_ROOTS;
	for (int i = 0; i < RECORD_MAX_ROOTS; i++)
		m.roots[i] = 1000 + i;
	if (!ASSERT_OK(record_open(&w, path, &m), "open"))
		goto out;
	ASSERT_OK(record_close(&w), "close");
	memset(&back, 0xff, sizeof(back));
	ASSERT_EQ(record_replay(path, collect, &got, &back, &st), 0, "header only is whole");
	ASSERT_EQ(st.records, 0, "no records");
	ASSERT_EQ(st.bytes, RECORD_HEADER_BYTES, "bytes");
	ASSERT_EQ(back.version, RECORD_VERSION, "version");
	ASSERT_EQ(back.header_bytes, RECORD_HEADER_BYTES, "header bytes");
	ASSERT_STREQ(back.hostname, m.hostname, "64-byte hostname");
	ASSERT_STREQ(back.tool_version, m.tool_version, "32-byte version");
	ASSERT_EQ(back.start_mono_ns, m.start_mono_ns, "monotonic start");
	ASSERT_EQ(back.start_real_ns, m.start_real_ns, "realtime start");
	ASSERT_EQ(back.capture_bytes, 65536, "capture bytes");
	ASSERT_EQ(back.nroots, RECORD_MAX_ROOTS, "roots");
	ASSERT_EQ(back.roots[0], 1000, "first root");
	ASSERT_EQ(back.roots[RECORD_MAX_ROOTS - 1], 1000 + RECORD_MAX_ROOTS - 1, "last root");

	/* Short strings, and record_meta_fill's clocks and hostname. */
	memset(&m, 0, sizeof(m));
	record_meta_fill(&m, "9.9.9");
	ASSERT_TRUE(m.start_mono_ns > 0 && m.start_real_ns > m.start_mono_ns, "clocks filled");
	m.nroots = 1;
	m.roots[0] = 1;
	ASSERT_OK(record_open(&w, path, &m), "open again (truncates)");
	ASSERT_OK(record_close(&w), "close");
	ASSERT_EQ(record_replay(path, collect, &got, &back, &st), 0, "whole");
	ASSERT_STREQ(back.tool_version, "9.9.9", "version");
	ASSERT_STREQ(back.hostname, m.hostname, "hostname");
	ASSERT_EQ(back.nroots, 1, "one root");
out:
	recs_free(&got);
	rm_path(path);
}

/* A header grown by a later tokenscope: readers skip the bytes they do not know. */
TEST(test_header_growth)
{
	void *rec[16];
	size_t len[16], n_file;
	int n = build_all(rec, len);
	struct record_writer w;
	struct record_meta m, back;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	char *path = tmp_path();
	unsigned char *file = NULL, *grown = NULL;
	const size_t extra = 37;

	if (!ASSERT_OK_PTR(path, "temp file"))
		goto out;
	test_meta(&m);
	record_open(&w, path, &m);
	for (int i = 0; i < n; i++)
		record_write(&w, rec[i], len[i]);
	ASSERT_OK(record_close(&w), "close");
	file = read_whole(path, &n_file);
	grown = malloc(n_file + extra);
	memcpy(grown, file, RECORD_HEADER_BYTES);
	memset(grown + RECORD_HEADER_BYTES, 0xa5, extra);
	memcpy(grown + RECORD_HEADER_BYTES + extra, file + RECORD_HEADER_BYTES,
	       n_file - RECORD_HEADER_BYTES);
	grown[12] = (RECORD_HEADER_BYTES + extra) & 0xff;
	grown[13] = (RECORD_HEADER_BYTES + extra) >> 8;
	write_file(path, grown, n_file + extra);
	ASSERT_EQ(record_replay(path, collect, &got, &back, &st), 0, "whole");
	ASSERT_EQ(back.header_bytes, RECORD_HEADER_BYTES + extra, "header length read");
	ASSERT_EQ(got.n, n, "every record");
	ASSERT_TRUE(got.n == n && !memcmp(got.rec[n - 1], rec[n - 1], len[n - 1]), "last intact");
	ASSERT_EQ(back.roots[0], 4242, "known fields still read");
out:
	free(file);
	free(grown);
	recs_free(&got);
	free_all(rec, n);
	rm_path(path);
}

/* Cut at every byte of the last two records: the whole records before the cut are fed. */
TEST(test_truncated_every_offset)
{
	void *rec[16];
	size_t len[16], n_file;
	int n = build_all(rec, len);
	struct record_writer w;
	struct record_meta m;
	char *path = tmp_path(), *cut = tmp_path();
	unsigned char *file = NULL;
	uint64_t off[17];
	int bad = 0;

	if (!ASSERT_OK_PTR(path, "temp file") || !ASSERT_OK_PTR(cut, "temp file"))
		goto out;
	test_meta(&m);
	record_open(&w, path, &m);
	off[0] = RECORD_HEADER_BYTES;
	for (int i = 0; i < n; i++) {
		record_write(&w, rec[i], len[i]);
		off[i + 1] = off[i] + 4 + len[i];
	}
	ASSERT_OK(record_close(&w), "close");
	file = read_whole(path, &n_file);
	if (!ASSERT_EQ(n_file, off[n], "file size is header plus framed records"))
		goto out;
	for (uint64_t c = off[n - 2]; c < n_file && bad < 5; c++) {
		struct record_replay_stats st;
		struct sink_recs got = { 0 };
		int whole = c < off[n - 1] ? n - 2 : n - 1; /* records entirely before the cut */
		int err;

		write_file(cut, file, c);
		err = record_replay(cut, collect, &got, NULL, &st);
		if (c == off[whole]) {
			/* A cut between records leaves a whole, shorter file. */
			if (!ASSERT_EQ(err, 0, "cut at a record boundary") ||
			    !ASSERT_EQ(got.n, whole, "records fed"))
				bad++;
		} else if (!ASSERT_EQ(err, -EPROTO, "truncated last record") ||
			   !ASSERT_EQ(got.n, whole, "whole records before the cut fed") ||
			   !ASSERT_EQ(st.records, whole, "stats count them") ||
			   !ASSERT_EQ(st.bad_offset, off[whole], "offset of the cut record") ||
			   !ASSERT_TRUE(strstr(st.reason, "truncated record"), "reason") ||
			   !ASSERT_TRUE(st.header_ok, "header ok")) {
			printf("  cut at %llu\n", (unsigned long long)c);
			bad++;
		}
		for (int i = 0; i < got.n && i < whole; i++)
			if (!ASSERT_TRUE(!memcmp(got.rec[i], rec[i], len[i]), "fed intact"))
				bad++;
		recs_free(&got);
	}
	/* And every cut inside the header. */
	for (uint64_t c = 1; c < RECORD_HEADER_BYTES && bad < 5; c++) {
		struct record_replay_stats st;
		struct sink_recs got = { 0 };
		int err;

		write_file(cut, file, c);
		err = record_replay(cut, collect, &got, NULL, &st);
		if (!ASSERT_EQ(err, -EBADMSG, "truncated header") ||
		    !ASSERT_FALSE(st.header_ok, "header not ok") ||
		    !ASSERT_EQ(got.calls, 0, "nothing fed") ||
		    !ASSERT_TRUE(strstr(st.reason, "truncated header"), "reason"))
			bad++;
		recs_free(&got);
	}
out:
	free(file);
	free_all(rec, n);
	rm_path(path);
	rm_path(cut);
}

TEST(test_not_a_recording)
{
	static const char *texts[] = { "", "hello world, this is not a recording at all\n", "T",
				       "TSRE", "{\"pid\":1}\n" };
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	unsigned char junk[4096];
	char *path = tmp_path();
	uint32_t x = 12345;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		size_t l = strlen(texts[i]);
		int err;

		write_file(path, texts[i], l);
		err = record_replay(path, collect, &got, NULL, &st);
		/* A prefix of the magic is a recording cut inside its header. */
		if (l && l < 8 && !memcmp(texts[i], RECORD_MAGIC, l)) {
			ASSERT_EQ(err, -EBADMSG, "magic prefix: truncated header");
		} else {
			ASSERT_EQ(err, -ENOEXEC, "not a recording");
			ASSERT_TRUE(strstr(st.reason, "not a tokenscope recording"), "reason");
		}
		ASSERT_FALSE(st.header_ok, "header not ok");
	}
	for (int round = 0; round < 20; round++) {
		for (size_t i = 0; i < sizeof(junk); i++) {
			x = x * 1103515245 + 12345;
			junk[i] = x >> 16;
		}
		write_file(path, junk, 64 + round * 200);
		ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -ENOEXEC, "garbage");
	}
	ASSERT_EQ(got.calls, 0, "nothing fed");
	ASSERT_EQ(record_replay("/nonexistent/x.tsr", collect, &got, NULL, &st), -ENOENT,
		  "missing file");
	ASSERT_FALSE(st.header_ok, "no header");
	rm_path(path);
}

/* A valid header followed by garbage: stops cleanly wherever framing fails (no crash). */
TEST(test_garbage_after_header)
{
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	unsigned char *file = NULL, junk[8192];
	char *path = tmp_path();
	size_t n_file;
	uint32_t x = 777;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	record_open(&w, path, &m);
	record_close(&w);
	file = read_whole(path, &n_file);
	for (int round = 0; round < 50; round++) {
		unsigned char buf[RECORD_HEADER_BYTES + sizeof(junk)];
		int err;

		for (size_t i = 0; i < sizeof(junk); i++) {
			x = x * 1103515245 + 12345;
			junk[i] = x >> 16;
		}
		/* Some rounds with small lengths, so the header-size check is what stops them. */
		if (round & 1)
			junk[0] = 16 + round, junk[1] = junk[2] = junk[3] = 0;
		memcpy(buf, file, RECORD_HEADER_BYTES);
		memcpy(buf + RECORD_HEADER_BYTES, junk, sizeof(junk));
		write_file(path, buf, sizeof(buf));
		err = record_replay(path, collect, &got, NULL, &st);
		ASSERT_TRUE(err == -EBADMSG || err == -EPROTO, "stopped early");
		ASSERT_TRUE(st.header_ok, "header ok");
		ASSERT_TRUE(st.bad_offset >= RECORD_HEADER_BYTES, "offset after the header");
		ASSERT_EQ(st.records, got.calls, "fed what it counted");
		recs_free(&got);
	}
	free(file);
	rm_path(path);
}

/* A version 1 file (data records without queued_ns) replays with the arrival unknown. */
TEST(test_version_1_data_records)
{
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	unsigned char v1[72 + 5], *file, *out;
	char *path = tmp_path();
	size_t n_file;
	uint32_t len = sizeof(v1), hsize = sizeof(v1), type = TS_EV_DATA;
	uint64_t conn = 7, enter = 100, exit = 200, pos = 0, spos = 0;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	record_open(&w, path, &m);
	record_close(&w);
	file = read_whole(path, &n_file);
	/* hdr, conn_id, enter, exit, pos, syscall_pos, then syscall_bytes.. as in version 2 */
	memset(v1, 0, sizeof(v1));
	memcpy(v1, &type, 4);
	memcpy(v1 + 4, &hsize, 4);
	memcpy(v1 + 16, &conn, 8);
	memcpy(v1 + 24, &enter, 8);
	memcpy(v1 + 32, &exit, 8);
	memcpy(v1 + 40, &pos, 8);
	memcpy(v1 + 48, &spos, 8);
	v1[56] = 5; /* syscall_bytes */
	v1[60] = 5; /* data_bytes */
	v1[68] = 1; /* dir */
	v1[71] = 0; /* status */
	memcpy(v1 + 72, "hello", 5);
	out = malloc(n_file + 4 + sizeof(v1));
	memcpy(out, file, n_file);
	out[8] = 1;
	memcpy(out + n_file, &len, 4);
	memcpy(out + n_file + 4, v1, sizeof(v1));
	write_file(path, out, n_file + 4 + sizeof(v1));
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), 0, "version 1 is read");
	if (ASSERT_EQ(got.n, 1, "one record")) {
		const struct ts_data_event *e = got.rec[0];

		ASSERT_EQ(got.len[0], sizeof(*e) + 5, "grown by queued_ns");
		ASSERT_EQ(e->hdr.size, sizeof(*e) + 5, "size updated");
		ASSERT_EQ(e->conn_id, 7, "conn_id");
		ASSERT_EQ(e->exit_ns, 200, "exit");
		ASSERT_EQ(e->queued_ns, 0, "arrival unknown");
		ASSERT_EQ(e->syscall_bytes, 5, "syscall_bytes moved");
		ASSERT_EQ(e->data_bytes, 5, "data_bytes moved");
		ASSERT_EQ(e->dir, 1, "dir moved");
		ASSERT_TRUE(!memcmp(e->data, "hello", 5), "payload moved");
	}
	ASSERT_EQ(st.bytes, n_file + 4 + sizeof(v1), "bytes are the file's");
	recs_free(&got);
	free(out);
	free(file);
	rm_path(path);
}

TEST(test_wrong_magic_and_version)
{
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	unsigned char *file = NULL;
	char *path = tmp_path();
	size_t n_file;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	record_open(&w, path, &m);
	record_close(&w);
	file = read_whole(path, &n_file);
	ASSERT_TRUE(!memcmp(file, "TSREC", 5), "magic on disk");
	ASSERT_EQ(file[8], 5, "version 5, little endian");
	ASSERT_EQ(file[12] | file[13] << 8, RECORD_HEADER_BYTES, "header length, little endian");

	file[0] = 'X';
	write_file(path, file, n_file);
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -ENOEXEC, "wrong magic");
	ASSERT_STREQ(st.reason, "not a tokenscope recording", "reason");
	file[0] = 'T';

	file[8] = 6;
	write_file(path, file, n_file);
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EPROTONOSUPPORT, "future");
	ASSERT_STREQ(st.reason, "unsupported version 6 (this tokenscope reads versions 1 to 5)",
		     "reason");
	ASSERT_FALSE(st.header_ok, "header not ok");
	file[8] = 0;
	write_file(path, file, n_file);
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EPROTONOSUPPORT, "version 0");
	file[8] = 4;

	file[12] = 10, file[13] = 0;
	write_file(path, file, n_file);
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EBADMSG, "header too short");
	ASSERT_STREQ(st.reason, "corrupt header length 10", "reason");
	file[12] = 0, file[13] = 0, file[14] = 0, file[15] = 0x40;
	write_file(path, file, n_file);
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EBADMSG, "header too long");
	ASSERT_EQ(got.calls, 0, "nothing fed");
	free(file);
	rm_path(path);
}

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

/* A header is input: clocks that would overflow the wall-time arithmetic, a capture limit or a
 * root pid no run can have, are refused with where and why; its strings come back printable. */
TEST(test_header_fields_checked)
{
	static const struct {
		size_t at, width;
		uint64_t value;
		const char *reason;
	} bad[] = {
		{ 16, 8, 1ull << 63,
		  "corrupt header: monotonic clock at 9223372036854775808 ns, past 2^62 (146 years "
		  "of uptime)" },
		{ 24, 8, UINT64_MAX,
		  "corrupt header: wall clock at 18446744073709551615 ns since 1970, past 2^62 "
		  "(the "
		  "year 2116)" },
		{ 32, 4, TS_CAPTURE_MAX + 1,
		  "corrupt header: capture limit 1048577 bytes (at most "
		  "1048576)" },
		{ 136 + 4, 4, 0, "corrupt header: root process 0" },
		{ 136, 4, RECORD_PID_MAX + 1, "corrupt header: root process 4194305" },
	};
	struct record_writer w;
	struct record_meta m, back;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	unsigned char *file = NULL, *orig;
	char *path = tmp_path();
	size_t n_file;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	m.start_mono_ns = RECORD_CLOCK_MAX_NS;
	m.start_real_ns = RECORD_CLOCK_MAX_NS;
	/* An escape sequence (clear the screen) and a byte that is not UTF-8 in the host name. */
	snprintf(m.hostname, sizeof(m.hostname), "node\033[2J\xff-7");
	record_open(&w, path, &m);
	record_close(&w);
	orig = read_whole(path, &n_file);
	ASSERT_EQ(record_replay(path, collect, &got, &back, &st), 0,
		  "the largest clocks are whole");
	ASSERT_EQ(back.start_mono_ns, RECORD_CLOCK_MAX_NS, "monotonic clock");
	ASSERT_STREQ(back.hostname, "node\xef\xbf\xbd[2J\xef\xbf\xbd-7",
		     "host name made printable");
	file = malloc(n_file);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(file, orig, n_file);
		for (size_t b = 0; b < bad[i].width; b++)
			file[bad[i].at + b] = (unsigned char)(bad[i].value >> (8 * b));
		write_file(path, file, n_file);
		ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EBADMSG, bad[i].reason);
		ASSERT_STREQ(st.reason, bad[i].reason, "reason");
		ASSERT_EQ(st.bad_offset, (int64_t)bad[i].at, "where");
		ASSERT_FALSE(st.header_ok, "header refused");
	}
	ASSERT_EQ(got.calls, 0, "no record in the file, none fed");
	recs_free(&got);
	free(file);
	free(orig);
	rm_path(path);
}

/* A corrupt length in the middle: the records before it are fed, the offset is reported. */
TEST(test_corrupt_length_in_middle)
{
	void *rec[16];
	size_t len[16], n_file;
	int n = build_all(rec, len);
	struct record_writer w;
	struct record_meta m;
	char *path = tmp_path();
	unsigned char *file = NULL, *copy = NULL;
	const int mid = 4;
	uint64_t at = RECORD_HEADER_BYTES;
	/* Zero, shorter than a record header, larger than any record, and a plausible length
	 * that disagrees with the record's own size. */
	const uint32_t lengths[] = { 0, 15, RECORD_MAX_BYTES + 1, 0xffffffffu, 0 };

	if (!ASSERT_OK_PTR(path, "temp file"))
		goto out;
	test_meta(&m);
	record_open(&w, path, &m);
	for (int i = 0; i < n; i++)
		record_write(&w, rec[i], len[i]);
	record_close(&w);
	file = read_whole(path, &n_file);
	copy = malloc(n_file);
	for (int i = 0; i < mid; i++)
		at += 4 + len[i];
	for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
		struct record_replay_stats st;
		struct sink_recs got = { 0 };
		uint32_t l = k == 4 ? len[mid] - 8 : lengths[k];
		int err;

		memcpy(copy, file, n_file);
		put32(copy + at, l);
		write_file(path, copy, n_file);
		err = record_replay(path, collect, &got, NULL, &st);
		ASSERT_EQ(err, -EBADMSG, "corrupt");
		ASSERT_EQ(got.n, mid, "records before it fed");
		ASSERT_EQ(st.bad_offset, at, "offset of the bad record");
		ASSERT_TRUE(st.header_ok, "header ok");
		ASSERT_TRUE(strstr(st.reason, "corrupt record"), "reason");
		recs_free(&got);
	}
	/* A record whose own size field is wrong, with a right length before it. */
	{
		struct record_replay_stats st;
		struct sink_recs got = { 0 };

		memcpy(copy, file, n_file);
		put32(copy + at + 4 + 4, len[mid] + 1);
		write_file(path, copy, n_file);
		ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), -EBADMSG,
			  "size disagrees");
		ASSERT_EQ(got.n, mid, "records before it fed");
		ASSERT_EQ(st.bad_offset, at, "offset");
		recs_free(&got);
	}
out:
	free(file);
	free(copy);
	free_all(rec, n);
	rm_path(path);
}

TEST(test_writer_rejects)
{
	struct ts_gpu_call_event e = { .hdr = { TS_EV_GPU_CALL, sizeof(e), 1, 1 } };
	struct record_writer w;
	struct record_meta m;
	struct record_replay_stats st;
	struct sink_recs got = { 0 };
	char *path = tmp_path();

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	memset(&w, 0, sizeof(w));
	ASSERT_OK(record_close(&w), "close of a zeroed writer (fd 0 is not closed)");
	ASSERT_TRUE(fcntl(0, F_GETFD) >= 0 || errno != EBADF, "stdin still open");
	ASSERT_EQ(record_open(&w, "/nonexistent/dir/x.tsr", &m), -ENOENT, "open error");
	ASSERT_OK(record_close(&w), "close after a failed open");
	ASSERT_OK(record_open(&w, path, &m), "open");
	ASSERT_EQ(record_write(&w, &e, 8), -EINVAL, "shorter than a header");
	ASSERT_EQ(record_write(&w, &e, sizeof(e) - 4), -EINVAL, "size disagrees");
	ASSERT_OK(record_write(&w, &e, sizeof(e)), "a good one");
	ASSERT_EQ(w.rejected, 2, "rejected counted");
	ASSERT_OK(record_close(&w), "close");
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), 0, "whole");
	ASSERT_EQ(got.n, 1, "only the good record");
	ASSERT_EQ(access(path, F_OK), 0, "exists");
	recs_free(&got);

	/* A feed that rejects records: counted, replay goes on. */
	got.reject_type = TS_EV_GPU_CALL;
	ASSERT_EQ(record_replay(path, collect, &got, NULL, &st), 0, "whole");
	ASSERT_EQ(st.rejected, 1, "rejected by the feed");
	ASSERT_EQ(st.records, 1, "still counted as fed");
	recs_free(&got);
	rm_path(path);
}

/*
 * The pipeline fed live (and recording) and the pipeline fed by replay print the same request
 * lines and loss figures: a streamed request, an unfinished one that the kernel's lost-record
 * count marks lost, and the kernel counters.
 */
struct live {
	struct pipeline pl;
	struct lines lines;
	struct summaries sums;
	struct record_writer w;
	char *out, *err;
	size_t out_len, err_len;
	FILE *fout, *ferr;
	uint64_t pos[4][2];
};

static void live_open(struct live *l, const char *path)
{
	struct pipeline_opts o = { 0 };
	struct record_meta m;
	struct sink ls;

	memset(l, 0, sizeof(*l));
	l->fout = open_memstream(&l->out, &l->out_len);
	l->ferr = open_memstream(&l->err, &l->err_len);
	o.err = l->ferr;
	pipeline_init(&l->pl, &o);
	lines_init(&l->lines, &(struct lines_opts){ .out = l->fout, .json = true, .tokens = true });
	ls = lines_sink(&l->lines);
	pipeline_add_sink(&l->pl, &ls);
	/* The summary on stderr, as with --json: pipeline_finish prints its total. */
	summaries_init(&l->sums, l->ferr);
	ls = summaries_sink(&l->sums);
	pipeline_add_sink(&l->pl, &ls);
	if (path) {
		test_meta(&m);
		m.nroots = 1;
		m.roots[0] = 100;
		record_open(&l->w, path, &m);
		pipeline_add_process(&l->pl, 100, true);
	}
}

static void live_close(struct live *l)
{
	pipeline_free(&l->pl);
	fclose(l->fout);
	fclose(l->ferr);
	free(l->out);
	free(l->err);
}

static void live_feed(struct live *l, const void *rec, size_t len)
{
	record_write(&l->w, rec, len);
	pipeline_feed(&l->pl, rec, len);
}

static void live_data(struct live *l, uint64_t id, int dir, const char *s, uint64_t ts)
{
	size_t n = strlen(s), sz = sizeof(struct ts_data_event) + n;
	struct ts_data_event *e = calloc(1, sz);

	e->hdr = (struct ts_event_hdr){ TS_EV_DATA, sz, 100, 100 };
	e->conn_id = id;
	e->enter_ns = ts;
	e->exit_ns = ts + 10;
	e->pos = e->syscall_pos = l->pos[id][dir];
	e->syscall_bytes = e->data_bytes = n;
	e->fd = 4 + id;
	e->dir = dir;
	e->syscall = dir ? TS_SYS_WRITE : TS_SYS_READ;
	e->last = 1;
	memcpy(e->data, s, n);
	l->pos[id][dir] += n;
	live_feed(l, e, sz);
	free(e);
}

#define BODY "{\"model\":\"m\",\"stream\":true}"
#define REQ "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n" BODY
#define HEAD "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
#define TOKEN "data: {\"choices\":[{\"text\":\"hi\"}]}\n\n"

static void count_tick(void *ctx, const struct pipeline_status *st)
{
	(void)st;
	(*(int *)ctx)++;
}

/* Rewrites a recording's format version (its header's bytes 8 to 11, little endian). */
static void set_version(const char *path, uint32_t version)
{
	unsigned char b[4] = { version, version >> 8, version >> 16, version >> 24 };
	int fd = open(path, O_WRONLY);

	if (ASSERT_TRUE(fd >= 0, "open to set the version")) {
		ASSERT_EQ(pwrite(fd, b, sizeof(b), 8), 4, "version written");
		close(fd);
	}
}

TEST(test_replay_through_pipeline)
{
	int ticks = 0;
	struct sink ticker = { .name = "ticks", .ctx = &ticks, .tick = count_tick };
	struct live a, b;
	struct replay feeder;
	struct record_meta back;
	struct record_replay_stats st;
	struct loss_report la, lb;
	char *path = tmp_path();
	uint64_t ks[TS_STAT_MAX] = { 0 };
	int err;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	live_open(&a, path);
	live_data(&a, 1, TS_DIR_IN, REQ, 1000000);
	live_data(&a, 1, TS_DIR_OUT, HEAD, 2000000);
	for (int i = 0; i < 4; i++)
		live_data(&a, 1, TS_DIR_OUT, TOKEN, 3000000 + i * 20000000ull);
	live_data(&a, 1, TS_DIR_OUT, "data: [DONE]\n\n", 90000000);
	/* A second request that never ends; then the kernel says it lost records. */
	live_data(&a, 2, TS_DIR_IN, REQ, 95000000);
	ks[TS_STAT_LOST_EVENTS] = 4;
	ks[TS_STAT_LOST_BYTES] = 400;
	ks[TS_STAT_UNCAPTURED_BYTES] = 17;
	pipeline_kernel_lost(&a.pl, ks[TS_STAT_LOST_EVENTS]);
	memcpy(a.pl.kstats, ks, sizeof(ks));
	record_write_kstats(&a.w, ks);
	pipeline_finish(&a.pl);
	ASSERT_OK(record_close(&a.w), "close");
	ASSERT_EQ(strlen(BODY), 27, "content length");

	/* Written as a recording of version 4 was: no drain marks, so the replay ticks by
	 * kernel time (a version 5 one ticks at its marks: test_tap_ticks_where_live_ticked). */
	set_version(path, 4);
	live_open(&b, NULL);
	pipeline_add_sink(&b.pl, &ticker);
	replay_init(&feeder, &b.pl, &back);
	err = record_replay(path, replay_feed, &feeder, &back, &st);
	ASSERT_EQ(err, 0, "whole");
	pipeline_finish(&b.pl);
	fflush(a.fout), fflush(b.fout), fflush(a.ferr), fflush(b.ferr);
	if (!ASSERT_TRUE(a.out && b.out && a.out_len > 0, "request lines"))
		printf("  live stderr: %s\n", a.err ? a.err : "");
	ASSERT_STREQ(b.out, a.out, "same request lines");
	ASSERT_TRUE(strstr(b.out, "\"outcome\":\"lost\""), "the open request reported lost");
	pipeline_loss(&a.pl, &la);
	pipeline_loss(&b.pl, &lb);
	ASSERT_EQ(lb.lost_events, 4, "lost events replayed");
	ASSERT_EQ(lb.lost_bytes, la.lost_bytes, "lost bytes");
	ASSERT_EQ(lb.uncaptured_bytes, 17, "uncaptured bytes");
	ASSERT_EQ(b.pl.bad_records, 0, "no bad records");
	ASSERT_EQ(b.pl.nroots, 1, "the recording's root registered");
	ASSERT_EQ(b.pl.roots[0], 100, "root pid");
	/* Kernel times 1, 2, 3, 23, 43, 63, 90, 95 ms: a tick after the first record, then one
	 * whenever REPLAY_TICK_NS (25 ms) have passed since the last (43, 90). */
	ASSERT_EQ(REPLAY_TICK_NS, 25000000ull, "the tick this count is for");
	ASSERT_EQ(ticks, 3, "sinks ticked by kernel time");
	live_close(&a);
	live_close(&b);
	rm_path(path);
}

/* What a sink saw at each tick: the clock, the latest record, the lost count, the traced. */
struct tick_log {
	int n;
	uint64_t now[64], rec[64], lost[64];
	uint32_t traced[64];
};

static void log_tick(void *ctx, const struct pipeline_status *st)
{
	struct tick_log *t = ctx;

	if (t->n < 64) {
		t->now[t->n] = st->now_ns;
		t->rec[t->n] = st->record_ns;
		t->lost[t->n] = st->loss.lost_events;
		t->traced[t->n] = st->ntraced;
	}
	t->n++;
}

/*
 * The recording as a tap (record/tap.h): a live pipeline fed records, the kernel's counters,
 * a process found in /proc with its container, and ticks at clock readings of its own (not on
 * the 25 ms a recording without marks is ticked by); its replay ticks at the same places, with
 * the same clock and the same status, and follows the process found.
 */
TEST(test_tap_ticks_where_live_ticked)
{
	static const uint64_t clocks[] = { 4000000, 9000000, 61000000, 62000000, 140000000 };
	struct tick_log la = { 0 }, lb = { 0 };
	struct sink ta = { .name = "ticks", .ctx = &la, .tick = log_tick };
	struct sink tb = { .name = "ticks", .ctx = &lb, .tick = log_tick };
	struct workload wl = { .container_id = "c0ffee" };
	uint64_t ks[TS_STAT_MAX] = { 0 };
	uint32_t pids[] = { 100 };
	struct record_tap tap;
	struct pipeline_tap calls;
	struct record_reader r;
	struct replay feeder;
	struct live a, b;
	char *path = tmp_path();
	bool found = false;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	live_open(&a, NULL);
	pipeline_add_sink(&a.pl, &ta);
	if (!ASSERT_OK(record_tap_open(&tap, path, 4096, pids, 1), "tap open"))
		return;
	calls = record_tap_calls(&tap);
	pipeline_set_tap(&a.pl, &calls);
	pipeline_add_process(&a.pl, 100, true);
	a.w.fd = -1; /* live_data's own writes go nowhere: the tap writes */
	pipeline_add_process(&a.pl, 300, false);
	pipeline_process_found(&a.pl, 300, 100);
	pipeline_label_process(&a.pl, 300, &wl);
	pipeline_process_root(&a.pl, 300, 100);
	for (size_t i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++) {
		live_data(&a, 1, i ? TS_DIR_OUT : TS_DIR_IN, i ? TOKEN : REQ, clocks[i] - 1000000);
		if (i == 2)
			ks[TS_STAT_LOST_EVENTS] = 3;
		pipeline_kstats(&a.pl, ks, TS_STAT_MAX);
		pipeline_clock(&a.pl, clocks[i]);
		pipeline_tick(&a.pl);
	}
	ASSERT_OK(record_tap_close(&tap), "tap closed");

	live_open(&b, NULL);
	pipeline_add_sink(&b.pl, &tb);
	if (!ASSERT_OK(record_reader_open(&r, path), "reader"))
		return;
	ASSERT_EQ(r.meta.version, RECORD_VERSION, "written as this version");
	ASSERT_EQ(r.meta.nroots, 1, "the header names the one -p process");
	ASSERT_EQ(r.meta.roots[0], 100, "its pid");
	ASSERT_EQ(r.meta.capture_bytes, 4096, "the capture size");
	replay_init(&feeder, &b.pl, &r.meta);
	ASSERT_OK(replay_run(&feeder, &r), "replayed whole");
	ASSERT_EQ(lb.n, la.n, "as many ticks as the live run");
	ASSERT_EQ(la.n, 5, "a tick per clock reading");
	for (int i = 0; i < la.n && i < lb.n; i++) {
		ASSERT_EQ(lb.now[i], la.now[i], "the same clock at the tick");
		ASSERT_EQ(lb.rec[i], la.rec[i], "the same records before the tick");
		ASSERT_EQ(lb.lost[i], la.lost[i], "the same losses at the tick");
		ASSERT_EQ(lb.traced[i], la.traced[i], "the same processes traced");
	}
	ASSERT_EQ(lb.now[0], clocks[0], "the clock, not the records' time");
	ASSERT_EQ(lb.lost[2], 3, "the lost count before the tick it came in");
	for (uint32_t i = 0; i < pipeline_nlive(&b.pl); i++)
		found |= pipeline_live_pid(&b.pl, i) == 300;
	ASSERT_TRUE(found, "the process found in /proc followed by the replay");
	record_reader_close(&r);
	live_close(&a);
	live_close(&b);
	rm_path(path);
}

/* A recording holding a request body cut where a value belongs (`[}`) once made `report` spin
 * forever in the body scanner: it finishes, with the request reported. */
TEST(test_replay_truncated_body)
{
	static const char req[] = "POST /v1/completions HTTP/1.1\r\nContent-Length: 24\r\n\r\n"
				  "{\"model\":\"x\",\"prompt\":[}";
	struct live a, b;
	struct replay feeder;
	struct record_meta back;
	struct record_replay_stats st;
	struct ts_conn_event close_ev = { 0 };
	char *path = tmp_path();

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	alarm(10); /* a hang is a failure, not a stuck test run */
	live_open(&a, path);
	live_data(&a, 1, TS_DIR_IN, req, 1000000);
	live_data(&a, 1, TS_DIR_OUT, HEAD, 2000000);
	live_data(&a, 1, TS_DIR_OUT, TOKEN, 3000000);
	live_data(&a, 1, TS_DIR_OUT, "data: [DONE]\n\n", 4000000);
	close_ev.hdr = (struct ts_event_hdr){ TS_EV_CONN_CLOSE, sizeof(close_ev), 100, 100 };
	close_ev.conn_id = 1;
	close_ev.ts_ns = 5000000;
	close_ev.rx_bytes = a.pos[1][TS_DIR_IN];
	close_ev.tx_bytes = a.pos[1][TS_DIR_OUT];
	live_feed(&a, &close_ev, sizeof(close_ev));
	ASSERT_OK(record_close(&a.w), "close");
	live_open(&b, NULL);
	replay_init(&feeder, &b.pl, &back);
	ASSERT_EQ(record_replay(path, replay_feed, &feeder, &back, &st), 0, "whole");
	pipeline_finish(&b.pl);
	alarm(0);
	fflush(b.fout);
	if (!ASSERT_TRUE(b.out && strstr(b.out, "\"model\":\"x\""), "reported, with what was read"))
		printf("  out: %s\n  live: %s\n", b.out ? b.out : "", a.out ? a.out : "");
	live_close(&a);
	live_close(&b);
	rm_path(path);
}

/* A GPU sample with two devices: every field, processes on the first, a name to clean. */
static void device_sample_fill(struct device_sample *g)
{
	memset(g, 0, sizeof(*g));
	g->seq = 7;
	g->ndevices = 2;
	g->devices_dropped = 1;
	g->devices[0] = (struct sampled_device){ .index = 0,
						 .mono_ns = 123456789,
						 .util_present = true,
						 .mem_present = true,
						 .clock_present = true,
						 .power_present = true,
						 .procs_present = true,
						 .util_pct = 45,
						 .mem_used = 1ull << 30,
						 .mem_total = 8ull << 30,
						 .sm_clock_hz = 1980000000,
						 .power_mw = 350125,
						 .nprocs = 2,
						 .procs_dropped = 3 };
	snprintf(g->devices[0].name, sizeof(g->devices[0].name), "Stub H200");
	snprintf(g->devices[0].uuid, sizeof(g->devices[0].uuid), "GPU-0000");
	g->devices[0].procs[0] = (struct sampled_proc){ 42, true, 1u << 29 };
	g->devices[0].procs[1] = (struct sampled_proc){ 43, false, 0 };
	g->devices[1] = (struct sampled_device){ .index = 1, .util_present = true, .util_pct = 7 };
	snprintf(g->devices[1].name, sizeof(g->devices[1].name), "B\x1b[2J");
}

/*
 * A GPU sample written as RECORD_EV_DEVICE_SAMPLE and read back is the same sample (its name made
 * printable); records that do not hold what they say are refused, never read past.
 */
TEST(test_device_sample_record)
{
	static struct device_sample in, out;
	struct record_writer w;
	struct record_meta m;
	struct record_reader rd;
	const void *rec;
	size_t len;
	char *path = tmp_path();
	unsigned char *copy;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	device_sample_fill(&in);
	ASSERT_OK(record_open(&w, path, &m), "open");
	ASSERT_OK(record_write_device_sample(&w, &in), "write");
	ASSERT_OK(record_close(&w), "close");
	if (!ASSERT_OK(record_reader_open(&rd, path), "reader"))
		return;
	if (ASSERT_EQ(record_next(&rd, &rec, &len), 1, "one record")) {
		ASSERT_OK(record_device_sample(rec, len, &out), "read back");
		ASSERT_EQ(out.seq, 7, "seq");
		ASSERT_EQ(out.ndevices, 2, "devices");
		ASSERT_EQ(out.devices_dropped, 1, "dropped");
		ASSERT_EQ(out.devices[0].util_pct, 45, "util");
		ASSERT_EQ(out.devices[0].mem_total, 8ull << 30, "mem");
		ASSERT_EQ(out.devices[0].power_mw, 350125, "power");
		ASSERT_TRUE(out.devices[0].procs_present && out.devices[0].clock_present, "flags");
		ASSERT_EQ(out.devices[0].nprocs, 2, "procs");
		ASSERT_EQ(out.devices[0].procs_dropped, 3, "procs dropped");
		ASSERT_EQ(out.devices[0].procs[0].pid, 42, "pid");
		ASSERT_EQ(out.devices[0].procs[0].mem_bytes, 1u << 29, "proc mem");
		ASSERT_FALSE(out.devices[0].procs[1].mem_present, "absent proc mem");
		ASSERT_STREQ(out.devices[0].name, "Stub H200", "name");
		ASSERT_FALSE(out.devices[1].mem_present, "device 1: no memory");
		ASSERT_TRUE(!strchr(out.devices[1].name, 0x1b), "escape made printable");
		copy = malloc(len + 8);
		if (copy) {
			struct record_sample_event *e = (struct record_sample_event *)copy;
			struct record_sample_device *d =
			    (struct record_sample_device *)(copy + sizeof(*e));

			memcpy(copy, rec, len);
			ASSERT_EQ(record_device_sample(copy, len - 1, &out), -EINVAL, "cut short");
			e->hdr.size = (uint32_t)len + 8;
			memset(copy + len, 0, 8);
			ASSERT_EQ(record_device_sample(copy, len + 8, &out), -EINVAL,
				  "bytes left over");
			e->hdr.size = (uint32_t)len;
			e->ndevices = DEV_MAX_DEVICES + 1;
			ASSERT_EQ(record_device_sample(copy, len, &out), -EINVAL,
				  "too many devices");
			e->ndevices = 2;
			d->nprocs = 3;
			ASSERT_EQ(record_device_sample(copy, len, &out), -EINVAL,
				  "more processes than held");
			d->nprocs = DEV_MAX_PROCS + 1;
			ASSERT_EQ(record_device_sample(copy, len, &out), -EINVAL,
				  "too many processes");
			free(copy);
		}
	}
	record_reader_close(&rd);
	unlink(path);
	free(path);
}

/*
 * Where a process runs, written as RECORD_EV_WORKLOAD and read back: the same names (an escape
 * made printable); replayed, it labels the process's requests as the live run did; a record of
 * the wrong size is refused.
 */
TEST(test_workload_record)
{
	static const struct workload in = {
		.container_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		.pod_uid = "12345678-aaaa-bbbb-cccc-0123456789ab",
		.k8s_namespace = "inference",
		.k8s_pod = "vllm-0\x1b[2J",
		.k8s_container = "engine",
	};
	struct workload out;
	struct record_writer w;
	struct record_meta m;
	struct record_reader rd;
	const void *rec;
	uint32_t pid = 0;
	size_t len;
	char *path = tmp_path();

	struct record_replay_stats st;
	struct record_meta back;
	struct replay feeder;
	struct live b;

	if (!ASSERT_OK_PTR(path, "temp file"))
		return;
	test_meta(&m);
	m.nroots = 1;
	m.roots[0] = 4242;
	ASSERT_OK(record_open(&w, path, &m), "open");
	ASSERT_OK(record_write_workload(&w, 4242, 1000, &in), "write");
	ASSERT_OK(record_close(&w), "close");
	if (!ASSERT_OK(record_reader_open(&rd, path), "reader"))
		return;
	ASSERT_EQ(rd.meta.version, RECORD_VERSION, "this version");
	if (ASSERT_EQ(record_next(&rd, &rec, &len), 1, "one record")) {
		ASSERT_OK(record_workload(rec, len, &pid, &out), "read back");
		ASSERT_EQ(pid, 4242, "its process");
		ASSERT_STREQ(out.container_id, in.container_id, "container id");
		ASSERT_STREQ(out.pod_uid, in.pod_uid, "pod uid");
		ASSERT_STREQ(out.k8s_namespace, "inference", "namespace");
		ASSERT_STREQ(out.k8s_container, "engine", "container");
		ASSERT_TRUE(!strchr(out.k8s_pod, 0x1b) && !strncmp(out.k8s_pod, "vllm-0", 6),
			    "escape made printable");
		ASSERT_EQ(record_workload(rec, len - 1, &pid, &out), -EINVAL, "cut short");
	}
	record_reader_close(&rd);
	live_open(&b, NULL);
	replay_init(&feeder, &b.pl, &back);
	ASSERT_EQ(record_replay(path, replay_feed, &feeder, &back, &st), 0, "replayed");
	ASSERT_EQ(st.rejected, 0, "nothing refused");
	if (ASSERT_EQ(b.pl.nlive, 1, "the root"))
		ASSERT_STREQ(b.pl.live[0].wl.k8s_namespace, "inference", "labelled as live");
	live_close(&b);
	unlink(path);
	free(path);
}

int main(void)
{
	return check_run_all();
}
