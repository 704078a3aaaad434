// SPDX-License-Identifier: MIT
/*
 * user/pipeline/reqbody.c: the fields of every captured request body, then the same bodies cut at
 * every byte as the capture limit would cut them: a field is then either unknown or right,
 * never wrong. Then the scanner's traps: keys inside strings, nested keys, escapes, values
 * cut in half.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "pipeline/reqbody.h"

static struct req_info parse_str(const char *s, size_t total)
{
	struct req_info ri;

	reqbody_parse((const uint8_t *)s, strlen(s), total ? total : strlen(s), &ri);
	return ri;
}

/* captured bytes of a body of total bytes. */
static struct req_info parse_str_n(const char *s, size_t captured, size_t total)
{
	struct req_info ri;

	reqbody_parse((const uint8_t *)s, captured, total, &ri);
	return ri;
}

/* The body of the first request in a .req fixture. */
static bool req_body(const struct fixture *f, const uint8_t **body, size_t *len)
{
	const char *head = (const char *)f->buf;
	const uint8_t *end = memmem(f->buf, f->len, "\r\n\r\n", 4);
	const char *cl = memmem(head, f->len, "Content-Length: ", 16);

	if (!end || !cl)
		return false;
	*body = end + 4;
	*len = strtoul(cl + 16, NULL, 10);
	return *body + *len <= f->buf + f->len;
}

struct body_expect {
	const char *name;
	const char *model;
	int stream;
	int64_t max_tokens;
	bool include_usage;
};

static const struct body_expect bodies[] = {
	{ "uvicorn_h11", "Qwen/Qwen2.5-0.5B", 1, 64, false }, /* max_completion_tokens */
	{ "uvloop_vllm", "Qwen/Qwen2.5-0.5B", 1, 32, true },
	{ "node_express", "m", 1, 16, false },	    /* the prompt quotes "model": "x" */
	{ "go_ollama", "llama3.2", -1, 32, false }, /* options.num_predict */
	{ "aiohttp_completion", "gpt2", 1, 4, false },
	{ "tgi", "", -1, 20, false }, /* parameters.max_new_tokens */
	{ "anthropic", "claude-x", 1, 1024, false },
	{ "error_frame", "Qwen/Qwen2.5-0.5B", 1, -1, false },
	{ "keepalive", "Qwen/Qwen2.5-0.5B", 1, 64, false },
	{ "responses_text", "Qwen/Qwen3-0.6B", 1, 64, false }, /* max_output_tokens */
};

TEST(test_fixture_bodies)
{
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		const struct body_expect *e = &bodies[i];
		const uint8_t *body;
		struct req_info ri;
		struct fixture f;
		char file[64];
		size_t len;

		snprintf(file, sizeof(file), "%s.req", e->name);
		if (!ASSERT_OK(fixture_load(&f, file), e->name))
			return;
		if (!ASSERT_TRUE(req_body(&f, &body, &len), e->name)) {
			fixture_free(&f);
			return;
		}
		reqbody_parse(body, len, len, &ri);
		ASSERT_STREQ(ri.model, e->model, e->name);
		ASSERT_EQ(ri.stream, e->stream, e->name);
		ASSERT_EQ(ri.max_tokens, e->max_tokens, e->name);
		ASSERT_EQ(ri.include_usage, e->include_usage, e->name);

		/* Cut at every byte: unknown or right. Told that even the whole body is cut,
		 * the scanner must read it all as cJSON did. */
		for (size_t k = 0; k <= len; k++) {
			bool whole = k == len;

			reqbody_parse(body, k, len + 1, &ri);
			if (!ASSERT_TRUE(ri.model[0] == '\0' || strcmp(ri.model, e->model) == 0,
					 "model") ||
			    !ASSERT_TRUE(ri.stream == -1 || ri.stream == e->stream, "stream") ||
			    !ASSERT_TRUE(ri.max_tokens == -1 || ri.max_tokens == e->max_tokens,
					 "max_tokens") ||
			    !ASSERT_TRUE(!ri.include_usage || e->include_usage, "usage")) {
				printf("  %s cut at %zu\n", e->name, k);
				break;
			}
			if (whole) {
				ASSERT_STREQ(ri.model, e->model, "scanner model");
				ASSERT_EQ(ri.stream, e->stream, "scanner stream");
				ASSERT_EQ(ri.max_tokens, e->max_tokens, "scanner max_tokens");
				ASSERT_EQ(ri.include_usage, e->include_usage, "scanner usage");
			}
		}
		fixture_free(&f);
	}
}

TEST(test_keys_inside_strings)
{
	const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"say {\\\"model\\\": "
			   "\\\"evil\\\", \\\"stream\\\": false, \\\"max_tokens\\\": 1}\"},"
			   "{\"model\":\"nested\",\"stream\":false}],"
			   "\"model\":\"good\",\"stream\":true,\"max_tokens\":7,\"tail\":\"xx";
	struct req_info ri = parse_str(body, 100000);

	ASSERT_STREQ(ri.model, "good", "model");
	ASSERT_EQ(ri.stream, 1, "stream");
	ASSERT_EQ(ri.max_tokens, 7, "max_tokens");

	/* A string ending in an escaped backslash ends there. */
	ri = parse_str("{\"a\":\"x\\\\\",\"model\":\"m\",\"b\":\"", 1000);
	ASSERT_STREQ(ri.model, "m", "after backslash");
	/* An escaped quote does not end a string. */
	ri = parse_str("{\"a\":\"x\\\",\\\"model\\\":\\\"bad\",\"model\":\"ok\",", 1000);
	ASSERT_STREQ(ri.model, "ok", "escaped quote");
}

TEST(test_cut_values)
{
	struct req_info ri;

	ri = parse_str("{\"model\":\"gpt-4", 100);
	ASSERT_STREQ(ri.model, "", "model cut");
	ri = parse_str("{\"stream\":tr", 100);
	ASSERT_EQ(ri.stream, -1, "literal cut");
	ri = parse_str("{\"max_tokens\":12", 100);
	ASSERT_EQ(ri.max_tokens, -1, "number maybe cut");
	ri = parse_str("{\"max_tokens\":12 ", 100);
	ASSERT_EQ(ri.max_tokens, 12, "number ended");
	ri = parse_str("{\"stream\":false,\"model\"", 100);
	ASSERT_EQ(ri.stream, 0, "false");
	ASSERT_STREQ(ri.model, "", "key without value");
	ri = parse_str("", 100);
	ASSERT_EQ(ri.stream, -1, "nothing captured");
}

TEST(test_limits_and_dialects)
{
	struct req_info ri;

	ri = parse_str("{\"max_tokens\":10,\"max_completion_tokens\":20}", 0);
	ASSERT_EQ(ri.max_tokens, 20, "max_completion_tokens preferred");
	ri = parse_str("{\"max_tokens\":10,\"max_completion_tokens\":20,", 1000);
	ASSERT_EQ(ri.max_tokens, 20, "also when cut");
	ri = parse_str("{\"model\":\"llama3\",\"options\":{\"temperature\":0,\"num_predict\":-1}}",
		       0);
	ASSERT_EQ(ri.max_tokens, -1, "num_predict -1 is no limit");
	ri = parse_str("{\"model\":\"llama3\",\"num_predict\":128,\"stream\":false}", 0);
	ASSERT_EQ(ri.max_tokens, 128, "top-level num_predict");
	ASSERT_EQ(ri.stream, 0, "stream false");
	ri =
	    parse_str("{\"options\":{\"max_new_tokens\":5},\"parameters\":{\"num_predict\":6}}", 0);
	ASSERT_EQ(ri.max_tokens, -1, "nested keys only under their parent");
	ri = parse_str("{\"inputs\":\"x\",\"parameters\":{\"max_new_tokens\":50},", 1000);
	ASSERT_EQ(ri.max_tokens, 50, "TGI cut");
	ri = parse_str("{\"stream_options\":{\"include_usage\":true},\"stream\":true,", 1000);
	ASSERT_TRUE(ri.include_usage, "include_usage cut");
	ri = parse_str("{\"max_tokens\":100.0}", 0);
	ASSERT_EQ(ri.max_tokens, 100, "integral float");
	ri = parse_str("{\"max_tokens\":1e400}", 0);
	ASSERT_EQ(ri.max_tokens, -1, "too big");
	ri = parse_str("{\"model\":null,\"stream\":null}", 0);
	ASSERT_STREQ(ri.model, "", "null model");
	ASSERT_EQ(ri.stream, -1, "null stream");
}

TEST(test_model_text)
{
	char body[400];
	struct req_info ri;

	ri = parse_str("{\"model\":\"a\\/b\\u0041\\u00e9\"", 1000);
	ASSERT_STREQ(ri.model, "a/bA?", "escapes");
	ri = parse_str("{\"model\":\"a\\/b\\u0041\\u00e9\"}", 0);
	ASSERT_STREQ(ri.model, "a/bA\xc3\xa9", "whole: UTF-8 decoded");
	/* A \u escape cut short once left the scanner's copy without its NUL. */
	ri = parse_str("{\"model\":\"ab\\u0\"}", 0);
	ASSERT_STREQ(ri.model, "ab", "short \\u escape");

	memset(body, 'm', sizeof(body));
	memcpy(body, "{\"model\":\"", 10);
	memcpy(body + sizeof(body) - 3, "\"}", 3);
	ri = parse_str(body, 0);
	ASSERT_EQ(strlen(ri.model), REQBODY_MODEL_MAX - 1, "truncated (whole)");
	body[sizeof(body) - 2] = ',';
	ri = parse_str(body, 1000);
	ASSERT_EQ(strlen(ri.model), REQBODY_MODEL_MAX - 1, "truncated (scanner)");
}

TEST(test_not_json)
{
	struct req_info ri;

	ri = parse_str("model=gpt&stream=true", 0);
	ASSERT_STREQ(ri.model, "", "form");
	ASSERT_EQ(ri.stream, -1, "form stream");
	ri = parse_str("[{\"model\":\"x\"}]", 0);
	ASSERT_STREQ(ri.model, "", "array");
	/* Complete but not valid JSON: the scanner still reads what it can. */
	ri = parse_str("{\"model\":\"x\",\"stream\":true,}", 0);
	ASSERT_STREQ(ri.model, "x", "trailing comma");
	ASSERT_EQ(ri.stream, 1, "trailing comma stream");
	/* Only `total` bytes are the body. */
	ri = parse_str("{\"model\":\"x\"}{\"model\":\"y\"}", 13);
	ASSERT_STREQ(ri.model, "x", "captured past total");
}

/* A delimiter where a value belongs once left the scanner where it was, forever: whole bodies
 * (lib/json refuses them, the scanner gets them) and cut ones. */
TEST(test_no_value_does_not_hang)
{
	static const char *const bodies[] = {
		"{\"model\":\"x\",\"messages\":[}",
		"{\"model\":\"x\",\"messages\":[}  ",
		"{\"a\":}",
		"{\"a\":]",
		"{\"a\":,}",
		"{\"a\":[1,]}",
		"{\"a\":[[}]]}",
	};
	struct req_info ri;

	alarm(10); /* a hang is a failure, not a stuck test run */
	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		ri = parse_str(bodies[i], 0);
		ri = parse_str(bodies[i], strlen(bodies[i]) + 100);
	}
	/* A NUL where a value belongs: strchr() finds the terminator in any delimiter set. Found by
	 * fuzz_pipeline in a request body built from kernel records. */
	static const uint8_t nul[] = "{\"model\":\"y\",\"messages\":[\0]}";
	reqbody_parse(nul, sizeof(nul) - 1, sizeof(nul) - 1, &ri);
	reqbody_parse(nul, sizeof(nul) - 1, sizeof(nul) + 100, &ri);
	alarm(0);
	ASSERT_STREQ(ri.model, "y", "read up to the NUL");
	ri = parse_str(bodies[0], 0);
	ASSERT_STREQ(ri.model, "x", "read up to the damage");
}

/* A model name is printable UTF-8 from either path, whatever the client sent. */
/* A key given twice: the first counts, whole or cut. Integers past int64_t, a NUL escape, bytes
 * after the body's value. */
TEST(test_duplicates_and_lenient)
{
	struct req_info ri;

	ri = parse_str("{\"model\":\"a\",\"stream\":true,\"model\":\"b\",\"stream\":false,"
		       "\"options\":{\"num_predict\":5},\"options\":{\"num_predict\":6}}",
		       0);
	ASSERT_STREQ(ri.model, "a", "first model");
	ASSERT_EQ(ri.stream, 1, "first stream");
	ASSERT_EQ(ri.max_tokens, 5, "first nested");
	ri = parse_str("{\"max_tokens\":123456789012345678901234567890,\"stream\":true}", 0);
	ASSERT_EQ(ri.max_tokens, -1, "past int64_t");
	ASSERT_EQ(ri.stream, 1, "read on");
	ri = parse_str("{\"model\":\"ab\\u0000cd\"} \r\n", 0);
	ASSERT_STREQ(ri.model, "ab", "\\u0000 ends the string");
}

TEST(test_model_cleaned)
{
	struct req_info ri;

	ri = parse_str("{\"model\":\"a\\u001b[2Jb\\nc\"}", 0);
	ASSERT_STREQ(ri.model,
		     "a\xef\xbf\xbd[2Jb\xef\xbf\xbd"
		     "c",
		     "whole: escapes decoded, cleaned");
	ri = parse_str("{\"model\":\"a\\u001b[2Jb\\nc\"", 1000);
	ASSERT_STREQ(ri.model,
		     "a\xef\xbf\xbd[2Jb\xef\xbf\xbd"
		     "c",
		     "scanner: the same");
	ri = parse_str("{\"model\":\"\xff\x1b\"", 1000);
	ASSERT_STREQ(ri.model, "\xef\xbf\xbd\xef\xbf\xbd", "raw bytes");
	ri = parse_str("{\"model\":\"\xff\x1b\"}", 0);
	ASSERT_STREQ(ri.model, "\xef\xbf\xbd\xef\xbf\xbd", "raw bytes, whole");
}

TEST(test_deep_and_random)
{
	char *deep = malloc(20001);
	uint64_t s = 0x2545f4914f6cdd1dull;
	uint8_t buf[512];
	struct req_info ri;

	for (int i = 0; i < 10000; i++) {
		deep[2 * i] = '[';
		deep[2 * i + 1] = '{';
	}
	deep[20000] = '\0';
	deep[0] = '{';
	ri = parse_str(deep, 0);
	ASSERT_EQ(ri.stream, -1, "deep complete");
	ri = parse_str(deep, 30000);
	ASSERT_EQ(ri.stream, -1, "deep cut");
	free(deep);

	for (int round = 0; round < 2000; round++) {
		size_t n = 1 + round % sizeof(buf);

		for (size_t i = 0; i < n; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			buf[i] =
			    s % 2 ? (uint8_t) "{}[]\":,\\ tm0"[(s >> 8) % 13] : (uint8_t)(s >> 16);
		}
		buf[0] = '{';
		reqbody_parse(buf, n, n + round % 2, &ri);
		if (!ASSERT_TRUE(strlen(ri.model) < REQBODY_MODEL_MAX, "model bounded"))
			break;
	}
}

/* vLLM's disaggregated prefill, as its proxy (toy_proxy_server.py) sends it: the prefill
 * worker's request asks it to keep the KV cache for a remote decode; the decode worker's carries
 * what the prefill's response returned. */
static const char vllm_prefill[] =
    "{\"model\": \"meta-llama/Llama-3.1-8B-Instruct\", \"messages\": [{\"role\": \"user\", "
    "\"content\": \"say \\\"kv_transfer_params\\\": {\\\"remote_host\\\": \\\"x\\\"}\"}], "
    "\"max_tokens\": 1, \"stream\": false, \"kv_transfer_params\": {\"do_remote_decode\": true, "
    "\"do_remote_prefill\": false, \"remote_engine_id\": null, \"remote_block_ids\": null, "
    "\"remote_host\": null, \"remote_port\": null}}";
static const char vllm_decode[] =
    "{\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"messages\":[{\"role\":\"user\","
    "\"content\":\"hi\"}],\"max_tokens\":64,\"stream\":true,\"kv_transfer_params\":"
    "{\"do_remote_prefill\":true,\"do_remote_decode\":false,\"remote_block_ids\":[1,2,3,17],"
    "\"remote_engine_id\":\"8c2a1f0e-5b7d-4c1e-9a55-0d6b3e2f7a90\",\"remote_request_id\":"
    "\"cmpl-___prefill_addr_10.0.0.5:21001___decode_addr_10.0.0.6:22001_a1b2c3-0\","
    "\"remote_host\":\"10.0.0.5\",\"remote_port\":5600,\"tp_size\":1}}";
/* SGLang's PD router: the same bootstrap room in both workers' requests, the prefill server's
 * bootstrap host and port. */
static const char sglang[] =
    "{\"text\": \"hello\", \"sampling_params\": {\"max_new_tokens\": 16}, \"stream\": true, "
    "\"bootstrap_host\": \"10.0.0.7\", \"bootstrap_port\": 8998, "
    "\"bootstrap_room\": 9223372036854775807}";

TEST(test_disagg_keys)
{
	struct req_info ri;
	size_t cut;

	for (int whole = 1; whole >= 0; whole--) {
		/* Whole (lib/json) and with one byte more in total (the scanner). */
		ri = parse_str(vllm_prefill, strlen(vllm_prefill) + !whole);
		ASSERT_TRUE(ri.disagg.kv, "prefill: kv_transfer_params");
		ASSERT_EQ(ri.disagg.do_remote_decode, 1, "do_remote_decode");
		ASSERT_EQ(ri.disagg.do_remote_prefill, 0, "do_remote_prefill");
		ASSERT_STREQ(ri.disagg.remote_host, "", "null host, not the prompt's");
		ASSERT_EQ(ri.disagg.remote_port, -1, "null port");
		ASSERT_EQ(ri.max_tokens, 1, "max_tokens still read");
		ri = parse_str(vllm_decode, strlen(vllm_decode) + !whole);
		ASSERT_EQ(ri.disagg.do_remote_prefill, 1, "decode: do_remote_prefill");
		ASSERT_STREQ(ri.disagg.remote_engine_id, "8c2a1f0e-5b7d-4c1e-9a55-0d6b3e2f7a90",
			     "engine id");
		ASSERT_STREQ(
		    ri.disagg.remote_request_id,
		    "cmpl-___prefill_addr_10.0.0.5:21001___decode_addr_10.0.0.6:22001_a1b2c3-0",
		    "request id");
		ASSERT_STREQ(ri.disagg.remote_host, "10.0.0.5", "host");
		ASSERT_EQ(ri.disagg.remote_port, 5600, "port");
		ri = parse_str(sglang, strlen(sglang) + !whole);
		ASSERT_TRUE(ri.disagg.room_set, "room");
		ASSERT_EQ(ri.disagg.bootstrap_room, INT64_MAX,
			  "room exact, not a double's rounding");
		ASSERT_STREQ(ri.disagg.bootstrap_host, "10.0.0.7", "bootstrap host");
		ASSERT_EQ(ri.disagg.bootstrap_port, 8998, "bootstrap port");
		ASSERT_TRUE(!ri.disagg.kv, "no kv_transfer_params");
		ASSERT_TRUE(reqbody_has_disagg(&ri.disagg), "join keys");
	}
	/* Cut anywhere: a key is right or unknown, never another value. */
	for (cut = 0; cut < strlen(vllm_decode); cut++) {
		char buf[sizeof(vllm_decode)];

		memcpy(buf, vllm_decode, cut);
		ri = parse_str_n(buf, cut, strlen(vllm_decode));
		if (ri.disagg.remote_port != -1)
			ASSERT_EQ(ri.disagg.remote_port, 5600, "cut: port right or unknown");
		if (ri.disagg.remote_host[0])
			ASSERT_STREQ(ri.disagg.remote_host, "10.0.0.5",
				     "cut: host right or unknown");
	}
	ri = parse_str("{\"model\":\"m\"}", 13);
	ASSERT_TRUE(!reqbody_has_disagg(&ri.disagg), "none in a plain body");
}

TEST(test_disagg_bad_values)
{
	struct req_info ri;
	char big[600];

	ri = parse_str("{\"bootstrap_port\":70000,\"bootstrap_room\":-1,"
		       "\"kv_transfer_params\":{\"remote_port\":\"5600\",\"do_remote_prefill\":1}}",
		       200);
	ASSERT_EQ(ri.disagg.bootstrap_port, -1, "port over 65535");
	ASSERT_TRUE(!ri.disagg.room_set, "negative room");
	ASSERT_EQ(ri.disagg.remote_port, -1, "a port as a string");
	ASSERT_EQ(ri.disagg.do_remote_prefill, -1, "a number is no boolean");
	ri = parse_str("{\"bootstrap_room\":1.5,\"bootstrap_port\":8e3}", 0);
	ASSERT_TRUE(!ri.disagg.room_set, "a fraction is no room");
	ASSERT_EQ(ri.disagg.bootstrap_port, -1, "an exponent is no port");
	ri = parse_str("{\"bootstrap_room\":92233720368547758070}", 0);
	ASSERT_TRUE(!ri.disagg.room_set, "a room past 2^63 is unknown, not rounded");
	ri = parse_str("{\"bootstrap_room\":[1,2],\"bootstrap_host\":\"a\\u001bb\\nc\"}", 0);
	ASSERT_TRUE(!ri.disagg.room_set, "a batch's rooms are not one");
	ASSERT_TRUE(!strchr(ri.disagg.bootstrap_host, '\x1b') &&
			!strchr(ri.disagg.bootstrap_host, '\n'),
		    "host cleaned");
	ri = parse_str("{\"kv_transfer_params\":{\"remote_host\":\"a\",\"remote_host\":\"b\"}}", 0);
	ASSERT_STREQ(ri.disagg.remote_host, "a", "the first of a key given twice");
	memset(big, 'h', sizeof(big));
	memcpy(big, "{\"bootstrap_host\":\"", 19);
	memcpy(big + sizeof(big) - 3, "\"}", 3);
	ri = parse_str(big, sizeof(big) - 1);
	ASSERT_TRUE(strlen(ri.disagg.bootstrap_host) < REQBODY_HOST_MAX, "host bounded");
}

int main(void)
{
	return check_run_all();
}
