// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "lib/clock.h"
#include "lib/dl.h"
#include "sinks/otlp_http.h"
#include "lib/version.h"

/* How long one wait for the transfer may sleep before looking at the deadlines again. */
#define OTLP_POLL_SLICE_MS 100
/* curl_multi_poll came with 7.66.0. */
#define OTLP_CURL_MIN 0x074200

int otlp_parse_url(const char *url, struct otlp_url *u, char *err, size_t errlen)
{
	const char *p, *host, *host_end, *slash, *colon = NULL;
	size_t n;

	memset(u, 0, sizeof(*u));
	if (!strncmp(url, OTLP_FILE_SCHEME, strlen(OTLP_FILE_SCHEME))) {
		const char *path = url + strlen(OTLP_FILE_SCHEME);

		if (!path[0] || strlen(path) >= sizeof(u->path)) {
			snprintf(err, errlen, "'%.64s': expected file:PATH", url);
			return -EINVAL;
		}
		u->file = true;
		strcpy(u->path, path);
		snprintf(u->full, sizeof(u->full), "%s", url);
		return 0;
	}
	if (!strncasecmp(url, "https://", 8)) {
		u->tls = true;
		host = url + 8;
	} else if (!strncasecmp(url, "http://", 7)) {
		host = url + 7;
	} else {
		snprintf(err, errlen, "'%s': expected http[s]://host[:port][/path] or file:PATH",
			 url);
		return strstr(url, "://") ? -EPROTONOSUPPORT : -EINVAL;
	}
	slash = strchr(host, '/');
	host_end = slash ? slash : host + strlen(host);
	if (*host == '[') {
		const char *rb = memchr(host, ']', host_end - host);

		if (!rb) {
			snprintf(err, errlen, "'%s': unterminated [IPv6 address]", url);
			return -EINVAL;
		}
		if (rb + 1 < host_end && rb[1] != ':') {
			snprintf(err, errlen, "'%s': expected ':' after ']'", url);
			return -EINVAL;
		}
		colon = rb + 1 < host_end ? rb + 1 : NULL;
		n = rb - host - 1;
		if (n >= sizeof(u->host))
			goto too_long;
		memcpy(u->host, host + 1, n);
	} else {
		colon = memchr(host, ':', host_end - host);
		n = (colon ? colon : host_end) - host;
		if (n >= sizeof(u->host))
			goto too_long;
		memcpy(u->host, host, n);
	}
	if (!u->host[0] || memchr(host, '@', host_end - host)) {
		snprintf(err, errlen, "'%s': expected http[s]://host[:port][/path] (no user info)",
			 url);
		return -EINVAL;
	}
	u->port = u->tls ? 443 : 80;
	if (colon) {
		unsigned long port = 0;

		for (p = colon + 1; p < host_end; p++) {
			if (!isdigit((unsigned char)*p) || (port = port * 10 + (*p - '0')) > 65535)
				break;
		}
		if (p < host_end || port == 0 || colon + 1 == host_end) {
			snprintf(err, errlen, "'%s': bad port", url);
			return -EINVAL;
		}
		u->port = port;
	}
	/* The host is a name or an address: nothing that would change what libcurl parses. */
	for (const char *c = u->host; *c; c++) {
		if (!isalnum((unsigned char)*c) && !strchr("-._:%", *c)) {
			snprintf(err, errlen, "'%s': bad host", url);
			return -EINVAL;
		}
	}
	n = host_end - host;
	if (n >= sizeof(u->hostport))
		goto too_long;
	memcpy(u->hostport, host, n);
	p = slash && slash[1] ? slash : OTLP_DEFAULT_PATH;
	if (strlen(p) >= OTLP_URL_PATH_MAX)
		goto too_long;
	for (const char *c = p; *c; c++) {
		if ((unsigned char)*c <= ' ' || *c == 0x7f || *c == '#') {
			snprintf(err, errlen,
				 "'%s': the path must be URL-encoded, without a fragment", url);
			return -EINVAL;
		}
	}
	strcpy(u->path, p);
	snprintf(u->full, sizeof(u->full), "%s://%s%.511s", u->tls ? "https" : "http", u->hostport,
		 u->path);
	return 0;
too_long:
	snprintf(err, errlen, "'%.64s...': too long", url);
	return -EINVAL;
}

int otlp_retry_after(const char *line, size_t n)
{
	static const char name[] = "retry-after:";
	const size_t k = sizeof(name) - 1;
	long long v = 0;
	size_t i;

	if (n < k || strncasecmp(line, name, k))
		return -2;
	for (i = k; i < n && (line[i] == ' ' || line[i] == '\t'); i++)
		;
	if (i == n || !isdigit((unsigned char)line[i]))
		return -1;
	for (; i < n && isdigit((unsigned char)line[i]); i++) {
		if (v < INT32_MAX)
			v = v * 10 + (line[i] - '0');
	}
	for (; i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n');
	     i++)
		;
	if (i < n)
		return -1;
	return v > INT32_MAX ? INT32_MAX : (int)v;
}

/* ---- libcurl, loaded at run time ---- */

static struct {
	__typeof__(curl_global_init) *global_init;
	__typeof__(curl_version_info) *version_info;
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_easy_cleanup) *easy_cleanup;
	__typeof__(curl_slist_append) *slist_append;
	__typeof__(curl_slist_free_all) *slist_free_all;
	__typeof__(curl_multi_init) *multi_init;
	__typeof__(curl_multi_add_handle) *multi_add_handle;
	__typeof__(curl_multi_remove_handle) *multi_remove_handle;
	__typeof__(curl_multi_perform) *multi_perform;
	__typeof__(curl_multi_poll) *multi_poll;
	__typeof__(curl_multi_info_read) *multi_info_read;
	__typeof__(curl_multi_strerror) *multi_strerror;
	__typeof__(curl_multi_cleanup) *multi_cleanup;
} lc;

static pthread_once_t lc_once = PTHREAD_ONCE_INIT;
static char lc_error[256]; /* "" once loaded */

static void lc_load(void)
{
	static const char *const names[] = { "libcurl.so.4", "libcurl-gnutls.so.4" };
	char first[160] = "";
	void *dl = NULL;
	const curl_version_info_data *v;

	if (!dl_possible()) {
		snprintf(lc_error, sizeof(lc_error), "OTLP export needs libcurl (%s)",
			 DL_STATIC_WHY);
		return;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !dl; i++) {
		dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!dl && !first[0])
			snprintf(first, sizeof(first), "%s", dlerror());
	}
	if (!dl) {
		snprintf(lc_error, sizeof(lc_error),
			 "OTLP export needs libcurl, which is not installed (%s): apt-get install "
			 "libcurl4",
			 first);
		return;
	}
#define LC(field, sym)                                 \
	do {                                           \
		*(void **)&lc.field = dlsym(dl, #sym); \
		if (!lc.field)                         \
			goto old;                      \
	} while (0)
	LC(global_init, curl_global_init);
	LC(version_info, curl_version_info);
	LC(easy_init, curl_easy_init);
	LC(easy_setopt, curl_easy_setopt);
	LC(easy_getinfo, curl_easy_getinfo);
	LC(easy_strerror, curl_easy_strerror);
	LC(easy_cleanup, curl_easy_cleanup);
	LC(slist_append, curl_slist_append);
	LC(slist_free_all, curl_slist_free_all);
	LC(multi_init, curl_multi_init);
	LC(multi_add_handle, curl_multi_add_handle);
	LC(multi_remove_handle, curl_multi_remove_handle);
	LC(multi_perform, curl_multi_perform);
	LC(multi_poll, curl_multi_poll);
	LC(multi_info_read, curl_multi_info_read);
	LC(multi_strerror, curl_multi_strerror);
	LC(multi_cleanup, curl_multi_cleanup);
#undef LC
	v = lc.version_info(CURLVERSION_NOW);
	if (!v || v->version_num < OTLP_CURL_MIN)
		goto old;
	if (lc.global_init(CURL_GLOBAL_DEFAULT)) {
		snprintf(lc_error, sizeof(lc_error), "libcurl failed to initialise");
		return;
	}
	lc_error[0] = 0;
	return;
old:
	v = lc.version_info ? lc.version_info(CURLVERSION_NOW) : NULL;
	snprintf(lc_error, sizeof(lc_error), "OTLP export needs libcurl 7.66 or later (found %s)",
		 v && v->version ? v->version : "an older one");
	memset(&lc, 0, sizeof(lc));
}

/* ---- the transport ---- */

struct otlp_http {
	CURL *easy;
	CURLM *multi;
	struct curl_slist *headers;
	struct otlp_reply *reply; /* of the POST in progress, for the header callback */
	char errbuf[CURL_ERROR_SIZE];
};

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
	struct otlp_http *h = ud;
	size_t n = size * nitems;
	int v;

	/* A status line starts a response (a 100 Continue, a proxy's, or the collector's). */
	if (n >= 5 && !memcmp(buf, "HTTP/", 5))
		h->reply->retry_after_s = -1;
	else if ((v = otlp_retry_after(buf, n)) >= -1)
		h->reply->retry_after_s = v;
	return n;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud)
{
	(void)buf;
	(void)ud;
	return size * nmemb; /* the collector's answer is read for its status only */
}

int otlp_http_open(struct otlp_http **out, const struct otlp_url *u, const char *ca_file, char *err,
		   size_t errlen)
{
	struct otlp_http *h;
	struct curl_slist *l;
	CURLcode rc = CURLE_OK;

	*out = NULL;
	pthread_once(&lc_once, lc_load);
	if (lc_error[0]) {
		snprintf(err, errlen, "%s", lc_error);
		return -ENOPKG;
	}
	if (ca_file && access(ca_file, R_OK)) {
		snprintf(err, errlen, "OTLP CA file '%s': %s", ca_file, strerror(errno));
		return -errno;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		goto nomem;
	h->easy = lc.easy_init();
	h->multi = lc.multi_init();
	l = lc.slist_append(NULL, "Content-Type: application/json");
	h->headers = l;
	/* No "Expect: 100-continue" round trip before a large body. */
	if (l)
		h->headers = l = lc.slist_append(l, "Expect:");
	if (!h->easy || !h->multi || !l)
		goto nomem_free;
#define SET(opt, val)                                           \
	do {                                                    \
		if (!rc)                                        \
			rc = lc.easy_setopt(h->easy, opt, val); \
	} while (0)
	SET(CURLOPT_URL, u->full);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_HTTPHEADER, h->headers);
	SET(CURLOPT_USERAGENT, "tokenscope/" TOKENSCOPE_VERSION);
	SET(CURLOPT_ERRORBUFFER, h->errbuf);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, h);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_POST, 1L);
	if (ca_file)
		SET(CURLOPT_CAINFO, ca_file);
#undef SET
	if (rc) {
		snprintf(err, errlen, "OTLP transport: %s", lc.easy_strerror(rc));
		otlp_http_close(h);
		return -EINVAL;
	}
	*out = h;
	return 0;
nomem_free:
	otlp_http_close(h);
nomem:
	snprintf(err, errlen, "OTLP transport: no memory");
	return -ENOMEM;
}

static int errno_of(CURLcode rc)
{
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

int otlp_http_post(struct otlp_http *h, const char *body, size_t len, uint64_t deadline_ns,
		   const uint64_t *cancel_ns, struct otlp_reply *reply)
{
	uint64_t now = mono_ns(), cancel = 0;
	CURLcode res = CURLE_OK;
	CURLMcode mc = CURLM_OK;
	bool done = false;
	long status = 0, os_errno = 0;
	int running = 1, left;
	CURLMsg *msg;

	memset(reply, 0, sizeof(*reply));
	reply->retry_after_s = -1;
	h->errbuf[0] = 0;
	h->reply = reply;
	if (now >= deadline_ns) {
		snprintf(reply->error, sizeof(reply->error), "timed out before sending");
		return -ETIMEDOUT;
	}
	lc.easy_setopt(h->easy, CURLOPT_POSTFIELDS, body);
	lc.easy_setopt(h->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	lc.easy_setopt(h->easy, CURLOPT_TIMEOUT_MS,
		       (long)((deadline_ns - now + NS_PER_MS - 1) / NS_PER_MS));
	mc = lc.multi_add_handle(h->multi, h->easy);
	while (!mc && running) {
		uint64_t end = deadline_ns;

		mc = lc.multi_perform(h->multi, &running);
		while ((msg = lc.multi_info_read(h->multi, &left))) {
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == h->easy) {
				res = msg->data.result;
				done = true;
			}
		}
		if (mc || done || !running)
			break;
		now = mono_ns();
		cancel = cancel_ns ? __atomic_load_n(cancel_ns, __ATOMIC_RELAXED) : 0;
		if (cancel && cancel < end)
			end = cancel;
		if (now >= end)
			break;
		if (end - now > OTLP_POLL_SLICE_MS * NS_PER_MS)
			end = now + OTLP_POLL_SLICE_MS * NS_PER_MS;
		mc = lc.multi_poll(h->multi, NULL, 0,
				   (int)((end - now + NS_PER_MS - 1) / NS_PER_MS), NULL);
	}
	/* Taking the handle out of a transfer in progress closes its connection. */
	lc.multi_remove_handle(h->multi, h->easy);
	h->reply = NULL;
	if (mc) {
		snprintf(reply->error, sizeof(reply->error), "%s", lc.multi_strerror(mc));
		return -EIO;
	}
	if (!done) {
		if (cancel && cancel < deadline_ns && mono_ns() >= cancel)
			snprintf(reply->error, sizeof(reply->error),
				 "timed out: cut short, tokenscope was exiting");
		else
			snprintf(reply->error, sizeof(reply->error), "timed out");
		return -ETIMEDOUT;
	}
	if (res == CURLE_OK) {
		lc.easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
		reply->status = (int)status;
		return 0;
	}
	lc.easy_getinfo(h->easy, CURLINFO_OS_ERRNO, &os_errno);
	if (os_errno)
		snprintf(reply->error, sizeof(reply->error), "%.200s (%.40s)",
			 h->errbuf[0] ? h->errbuf : lc.easy_strerror(res), strerror((int)os_errno));
	else
		snprintf(reply->error, sizeof(reply->error), "%.250s",
			 h->errbuf[0] ? h->errbuf : lc.easy_strerror(res));
	return errno_of(res);
}

void otlp_http_close(struct otlp_http *h)
{
	if (!h)
		return;
	if (h->easy)
		lc.easy_cleanup(h->easy);
	if (h->multi)
		lc.multi_cleanup(h->multi);
	if (h->headers)
		lc.slist_free_all(h->headers);
	free(h);
}
