/* SPDX-License-Identifier: MIT */
/*
 * What every output must be, whatever the traffic or the recording held, checked by the
 * targets that turn outputs on (fuzz_pipeline, fuzz_record, fuzz_prom_label, fuzz_json_string):
 *
 *   terminal text (request lines, summaries, diagnosis, top, messages)
 *       strict UTF-8, no control character but the newline (no C0, DEL or C1: a terminal
 *       obeys them) and no bidirectional override, embedding, isolate or mark (they reorder
 *       what a terminal shows), save top's own clear-screen sequence on a terminal
 *   JSON lines: each line one strict UTF-8 JSON value (cJSON, nothing after it)
 *   a JSON document (an OTLP batch, the timeline): the same, as a whole
 *   the HTML report: strict UTF-8, and its data element JSON with no '<' in it, so nothing
 *       can end the element or open a comment
 *   the Prometheus exposition: strict UTF-8, and every sample line parses as the text format
 *       0.0.4 wants it
 *
 * The checkers are written apart from user/ (their own UTF-8 validator, cJSON for JSON, a
 * parser of the exposition here) so that they cannot share its bugs.
 */
#ifndef TS_FUZZ_OUTPUTS_H
#define TS_FUZZ_OUTPUTS_H

#include <cjson/cJSON.h>
#include <dirent.h>
#include <unistd.h>

#include "fuzz.h"

/* Where a failed check shows the bytes around what broke it. */
static inline void fuzz_show_line(const char *buf, size_t len, size_t at)
{
	const char *ls = buf + at, *end = buf + len;

	while (ls > buf && ls[-1] != '\n')
		ls--;
	fuzz_hexdump("line", ls, (size_t)(end - ls) < 256 ? (size_t)(end - ls) : 256);
}

/*
 * Terminal text: UTF-8, no control character but '\n'. clear, when not NULL, is a sequence the
 * output may hold as it is (top's clear-screen on a terminal).
 */
FUZZ_CHECKER static inline void fuzz_check_text(const char *what, const char *buf, size_t len,
						const char *clear)
{
	size_t bad = fuzz_utf8_bad((const uint8_t *)buf, len);

	if (bad != len) {
		fuzz_show_line(buf, len, bad);
		FUZZ_FAIL("%s: not UTF-8 at byte %zu of %zu (0x%02x)", what, bad, len,
			  (uint8_t)buf[bad]);
	}
	for (size_t i = 0; i < len; i++) {
		uint8_t c = (uint8_t)buf[i];

		if (clear && c == 0x1b && len - i >= strlen(clear) &&
		    !memcmp(buf + i, clear, strlen(clear))) {
			i += strlen(clear) - 1;
			continue;
		}
		/* U+200E, U+200F, U+202A..U+202E, U+2066..U+2069 */
		bool bidi = c == 0xe2 && i + 2 < len &&
			    (((uint8_t)buf[i + 1] == 0x80 &&
			      ((uint8_t)buf[i + 2] == 0x8e || (uint8_t)buf[i + 2] == 0x8f ||
			       ((uint8_t)buf[i + 2] >= 0xaa && (uint8_t)buf[i + 2] <= 0xae))) ||
			     ((uint8_t)buf[i + 1] == 0x81 && (uint8_t)buf[i + 2] >= 0xa6 &&
			      (uint8_t)buf[i + 2] <= 0xa9));

		if ((c < 0x20 && c != '\n') || c == 0x7f || bidi ||
		    (c == 0xc2 && i + 1 < len && (uint8_t)buf[i + 1] < 0xa0)) {
			fuzz_show_line(buf, len, i);
			FUZZ_FAIL("%s: control character 0x%02x at byte %zu of terminal text", what,
				  c, i);
		}
	}
}

/* One JSON value, strict UTF-8, nothing after it but spaces and newlines; returned parsed. */
FUZZ_CHECKER static inline cJSON *fuzz_check_json(const char *what, const char *buf, size_t len)
{
	size_t bad = fuzz_utf8_bad((const uint8_t *)buf, len);
	const char *end = NULL;
	cJSON *j;

	if (bad != len) {
		fuzz_show_line(buf, len, bad);
		FUZZ_FAIL("%s: not UTF-8 at byte %zu of %zu (0x%02x)", what, bad, len,
			  (uint8_t)buf[bad]);
	}
	FUZZ_CHECK(memchr(buf, 0, len) == NULL, "%s: a NUL inside the document", what);
	j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
	if (!j)
		fuzz_hexdump("document", buf, len < 512 ? len : 512);
	FUZZ_CHECK(j, "%s: not JSON (cJSON stops at byte %td)", what,
		   cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - buf : -1);
	while (end < buf + len && (*end == '\n' || *end == ' '))
		end++;
	FUZZ_CHECK(end == buf + len, "%s: bytes after the JSON value", what);
	return j;
}

/* JSON lines: every line one JSON value. Returns how many. */
FUZZ_CHECKER static inline size_t fuzz_check_json_lines(const char *what, const char *buf,
							size_t len)
{
	size_t n = 0;

	for (const char *l = buf; l < buf + len;) {
		const char *nl = memchr(l, '\n', (size_t)(buf + len - l));
		size_t ll = nl ? (size_t)(nl - l) : (size_t)(buf + len - l);

		FUZZ_CHECK(nl, "%s: the last line has no newline", what);
		cJSON_Delete(fuzz_check_json(what, l, ll));
		n++;
		l += ll + 1;
	}
	return n;
}

/* The HTML report: UTF-8, and the data element's text JSON without a '<'. */
FUZZ_CHECKER static inline void fuzz_check_html(const char *buf, size_t len)
{
	static const char open[] = "<script type=\"application/json\" id=\"ts-data\">";
	size_t bad = fuzz_utf8_bad((const uint8_t *)buf, len);
	const char *data, *end;

	if (bad != len) {
		fuzz_show_line(buf, len, bad);
		FUZZ_FAIL("html: not UTF-8 at byte %zu of %zu", bad, len);
	}
	FUZZ_CHECK(memchr(buf, 0, len) == NULL, "html: a NUL in the page");
	data = strstr(buf, open);
	FUZZ_CHECK(data, "html: no data element");
	data += strlen(open);
	end = strstr(data, "</script>");
	FUZZ_CHECK(end, "html: the data element does not end");
	FUZZ_CHECK(memchr(data, '<', (size_t)(end - data)) == NULL,
		   "html: a '<' inside the data element");
	cJSON_Delete(fuzz_check_json("html data", data, (size_t)(end - data)));
}

FUZZ_CHECKER static inline bool fuzz_prom_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

FUZZ_CHECKER static inline bool fuzz_prom_name_char(char c)
{
	return fuzz_prom_name_start(c) || (c >= '0' && c <= '9');
}

FUZZ_CHECKER static inline bool fuzz_prom_bad(const char **why, const char *what)
{
	*why = what;
	return false;
}

/* A label's value as it must read back (NULL: any), and whether a line carried it. */
struct fuzz_prom_want {
	const char *label;
	const char *value;
	bool seen;
};

#define FUZZ_PROM_VALUE_MAX 1024

/* One sample line; false with *why set when it is not one. */
FUZZ_CHECKER static inline bool fuzz_prom_sample(const char *l, size_t n, struct fuzz_prom_want *w,
						 const char **why)
{
	char value[FUZZ_PROM_VALUE_MAX];
	size_t i = 0;

	if (!n || !fuzz_prom_name_start(l[0]))
		return fuzz_prom_bad(why, "no metric name");
	while (i < n && fuzz_prom_name_char(l[i]))
		i++;
	if (i < n && l[i] == '{') {
		i++;
		while (i < n && l[i] != '}') {
			size_t name = i, v = 0;
			bool wanted;

			if (!fuzz_prom_name_start(l[i]) || l[i] == ':')
				return fuzz_prom_bad(why, "bad label name");
			while (i < n && fuzz_prom_name_char(l[i]) && l[i] != ':')
				i++;
			wanted = w && w->label && i - name == strlen(w->label) &&
				 !memcmp(l + name, w->label, i - name);
			if (i + 1 >= n || l[i] != '=' || l[i + 1] != '"')
				return fuzz_prom_bad(why, "no =\" after a label name");
			for (i += 2; i < n && l[i] != '"'; i++) {
				char c = l[i];

				if (c == '\\') {
					if (i + 1 >= n)
						return fuzz_prom_bad(why, "a backslash at the end");
					c = l[++i];
					if (c == 'n')
						c = '\n';
					else if (c != '\\' && c != '"')
						return fuzz_prom_bad(
						    why, "an escape other than \\\\ \\\" \\n");
				}
				if (v + 1 < sizeof(value))
					value[v++] = c;
			}
			if (i >= n)
				return fuzz_prom_bad(why,
						     "a label value without its closing quote");
			value[v] = 0;
			i++;
			if (wanted && w->value) {
				if (strcmp(value, w->value) && !w->seen)
					return fuzz_prom_bad(why,
							     "the label differs from its value");
				w->seen = true;
			}
			if (i < n && l[i] == ',')
				i++;
			else if (i < n && l[i] != '}')
				return fuzz_prom_bad(why, "no comma between labels");
		}
		if (i >= n)
			return fuzz_prom_bad(why, "no closing brace");
		i++;
	}
	if (i >= n || l[i] != ' ' || i + 1 >= n)
		return fuzz_prom_bad(why, "no value");
	return true;
}

/* The Prometheus exposition: UTF-8, no NUL, newline-ended lines, each a comment or a sample. */
FUZZ_CHECKER static inline void fuzz_check_prom(const char *buf, size_t len,
						struct fuzz_prom_want *w)
{
	size_t bad = fuzz_utf8_bad((const uint8_t *)buf, len);

	if (bad != len) {
		fuzz_show_line(buf, len, bad);
		FUZZ_FAIL("prometheus: not UTF-8 at byte %zu (0x%02x)", bad, (uint8_t)buf[bad]);
	}
	FUZZ_CHECK(memchr(buf, 0, len) == NULL, "prometheus: a NUL in the exposition");
	for (const char *l = buf; l < buf + len;) {
		const char *nl = memchr(l, '\n', (size_t)(buf + len - l));
		size_t n = nl ? (size_t)(nl - l) : (size_t)(buf + len - l);
		const char *why = NULL;

		FUZZ_CHECK(nl, "prometheus: the exposition does not end with a newline");
		if (n && l[0] != '#' && !fuzz_prom_sample(l, n, w, &why)) {
			fuzz_hexdump("line", l, n);
			FUZZ_FAIL("prometheus: not a sample line: %s", why);
		}
		l += n + 1;
	}
}

/* A file's whole content (malloc'd, NUL-terminated; *len without the NUL); NULL if unreadable. */
static inline char *fuzz_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		size_t got = fread(buf + n, 1, cap - n - 1, f);

		n += got;
		if (!got)
			break;
	}
	fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

static char fuzz_tmpdir_path[64];

static inline void fuzz_tmpdir_remove(void)
{
	DIR *d = opendir(fuzz_tmpdir_path);
	struct dirent *de;
	char path[128];

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", fuzz_tmpdir_path, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(fuzz_tmpdir_path);
}

/* A directory of this process's own for the outputs that are files: made once, removed with
 * what it holds when the process exits. */
static inline const char *fuzz_tmpdir(void)
{
	if (!fuzz_tmpdir_path[0]) {
		snprintf(fuzz_tmpdir_path, sizeof(fuzz_tmpdir_path), "/dev/shm/tsfuzz.XXXXXX");
		if (!mkdtemp(fuzz_tmpdir_path)) {
			snprintf(fuzz_tmpdir_path, sizeof(fuzz_tmpdir_path), "/tmp/tsfuzz.XXXXXX");
			if (!mkdtemp(fuzz_tmpdir_path))
				abort();
		}
		atexit(fuzz_tmpdir_remove);
	}
	return fuzz_tmpdir_path;
}

#endif
