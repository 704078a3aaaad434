/* SPDX-License-Identifier: MIT */
/*
 * The OTLP/HTTP transport: one POST of an encoded body to the collector, on libcurl, with
 * http:// and https:// (certificates verified; a private CA with ca_file) and the proxies
 * libcurl takes from the environment (http_proxy, https_proxy, all_proxy, no_proxy). The
 * connection is kept open between POSTs when the collector allows it.
 *
 * libcurl is loaded when the first transport is opened (dlopen of libcurl.so.4, else the
 * GnuTLS flavour libcurl-gnutls.so.4), not linked: tokenscope starts and traces on a machine
 * without it, the static build included, and only --otlp needs it. Opening says so plainly
 * when it is missing.
 *
 * A POST runs on CLOCK_MONOTONIC until its deadline, and is cut short once an optional cancel
 * time (read atomically: another thread may set it) has passed; it looks at both every 100 ms
 * at most.
 */
#ifndef TS_OTLP_HTTP_H
#define TS_OTLP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTLP_DEFAULT_PATH "/v1/traces"

/* file:PATH: the batches as lines of a file (OTLP's file format: one JSON-encoded export
 * request a line), for a collector's file receiver or a replay kept offline. */
#define OTLP_FILE_SCHEME "file:"
/* The longest path of an http[s] URL (a collector's path is short). */
#define OTLP_URL_PATH_MAX 512

struct otlp_url {
	bool file;	    /* file:PATH (path holds PATH); nothing else is set */
	bool tls;	    /* https */
	char host[256];	    /* without brackets for IPv6 */
	uint16_t port;	    /* 80 or 443 unless given */
	char hostport[264]; /* as given */
	char path[4096];    /* "/v1/traces" when none was given; file: the file's path */
	char full[4200];    /* scheme://hostport/path, what is requested; file:PATH */
};

/* "http[s]://host[:port][/path]" or "file:PATH"; -EPROTONOSUPPORT for another scheme, -EINVAL
 * for a malformed URL; err says why. */
int otlp_parse_url(const char *url, struct otlp_url *u, char *err, size_t errlen);

/* A header line as received ("Name: value", CRLF or not, n bytes, not NUL-terminated):
 * Retry-After in seconds (capped at INT32_MAX), -1 for a Retry-After that is not a count of
 * seconds (an HTTP date), -2 for any other header. */
int otlp_retry_after(const char *line, size_t n);

struct otlp_reply {
	int status;	   /* the HTTP status; 0 when no response came */
	int retry_after_s; /* -1: none, or not in seconds */
	char error[256];   /* why no response came, "" if one did */
};

struct otlp_http;

/* Loads libcurl (once) and prepares POSTs to u; ca_file (NULL: the system's CAs) verifies an
 * https collector. Negative errno with err saying why. */
int otlp_http_open(struct otlp_http **h, const struct otlp_url *u, const char *ca_file, char *err,
		   size_t errlen);
/* One POST of body[0..len): 0 when a response came (reply->status), else a negative errno
 * (-ETIMEDOUT past the deadline or the cancel time) with reply->error. */
int otlp_http_post(struct otlp_http *h, const char *body, size_t len, uint64_t deadline_ns,
		   const uint64_t *cancel_ns, struct otlp_reply *reply);
void otlp_http_close(struct otlp_http *h);

#endif
