// SPDX-License-Identifier: MIT
/*
 * user/record/record.c and user/record/replay.c: a .tsr file read by record_replay and fed by
 * replay_feed into a real pipeline with its exporters, as `tokenscope report` does. The input is
 * the file, written to a memfd and opened by record_replay as /proc/self/fd/N (its API takes a
 * path).
 *
 * The pipeline's options come from the header's reserved flags word (offset 392), which the
 * reader does not interpret, so every file is still a plain recording (FP_* in
 * fuzz_pipeline.h).
 *
 * Properties: the return value is one record.h lists and agrees with the stats (whole file:
 * no bad offset and no reason; otherwise a reason), every record handed to the feed is framed
 * (at least a header, and the header's size is its length), the stats count what was fed, and
 * the metadata strings are terminated.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_pipeline.h"
#include "record/record.h"
#include "record/replay.h"

#define RECORD_FUZZ_FLAGS_AT 392

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct rctx {
	struct replay feeder;
	uint64_t fed;
};

static int feed(void *ctx, const void *rec, size_t len)
{
	struct rctx *c = ctx;
	struct ts_event_hdr h;

	FUZZ_CHECK(len >= sizeof(h), "a record of %zu bytes", len);
	memcpy(&h, rec, sizeof(h));
	FUZZ_CHECK(h.size == len, "a record of %zu bytes whose header says %u", len, h.size);
	c->fed++;
	return replay_feed(&c->feeder, rec, len);
}

static bool known_error(int rc)
{
	return rc == 0 || rc == -EBADMSG || rc == -EPROTO || rc == -ENOEXEC ||
	       rc == -EPROTONOSUPPORT || rc == -ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned flags = size > RECORD_FUZZ_FLAGS_AT ? data[RECORD_FUZZ_FLAGS_AT] : 0;
	struct record_replay_stats st;
	struct record_meta meta = { 0 };
	struct fuzz_pipeline f;
	struct rctx c = { 0 };
	char path[64];
	int fd = memfd_create("fuzz_record", MFD_CLOEXEC), rc;

	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fuzz_pipeline_open(&f, flags);
	replay_init(&c.feeder, &f.pl, &meta);
	rc = record_replay(path, feed, &c, &meta, &st);
	close(fd);

	FUZZ_CHECK(known_error(rc), "record_replay returned %d (%s)", rc, st.reason);
	FUZZ_CHECK(memchr(st.reason, 0, sizeof(st.reason)), "reason not terminated");
	FUZZ_CHECK(st.records == c.fed, "stats say %llu records, %llu were fed",
		   (unsigned long long)st.records, (unsigned long long)c.fed);
	FUZZ_CHECK(st.rejected <= st.records, "more rejected than fed");
	FUZZ_CHECK(st.bytes <= size, "read %llu bytes of a %zu-byte file",
		   (unsigned long long)st.bytes, size);
	if (rc == 0)
		FUZZ_CHECK(st.header_ok && st.bad_offset == -1 && !st.reason[0],
			   "a whole file with a bad offset %lld or a reason \"%s\"",
			   (long long)st.bad_offset, st.reason);
	else
		FUZZ_CHECK(st.reason[0] && st.bad_offset >= 0 && (uint64_t)st.bad_offset <= size,
			   "error %d without a reason or an offset in the file (%lld)", rc,
			   (long long)st.bad_offset);
	if (!st.header_ok)
		FUZZ_CHECK(c.fed == 0, "records fed from a file whose header was refused");
	if (st.header_ok) {
		FUZZ_CHECK(memchr(meta.tool_version, 0, sizeof(meta.tool_version)) &&
			       memchr(meta.hostname, 0, sizeof(meta.hostname)),
			   "metadata strings not terminated");
		FUZZ_CHECK(meta.nroots <= RECORD_MAX_ROOTS, "%u roots", meta.nroots);
	}
	fuzz_pipeline_close(&f);
	return 0;
}
