// SPDX-License-Identifier: MIT
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "lib/escape.h"
#include "lib/utf8.h"
#include "lib/wrap.h"

/* Bytes of the UTF-8 character at s (1 for a byte that starts none), at most n. */
static size_t char_len(const unsigned char *s, size_t n)
{
	size_t l = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 1;

	return l > n ? n : l;
}

static int cells(const unsigned char *s, size_t l)
{
	if (l == 1)
		return s[0] == '\t' ? 8 : 1;
	return escape_cell_width(utf8_decode(s, l));
}

/* One line (no newline) of n bytes, broken as wrap.h says. */
static void wrap_line(FILE *out, const char *line, size_t n, int width)
{
	size_t indent = strspn(line, " ");
	const char *p = line, *end = line + n;
	int avail = width;

	/* A JSON object (a request line where JSON goes to stderr) is a record, never broken. */
	if (n && line[0] == '{') {
		fwrite(line, 1, n, out);
		return;
	}
	if (indent > (size_t)width / 2)
		indent = 0;
	for (;;) {
		const char *q = p, *brk = NULL, *soft = NULL;
		int w = 0;

		/* How far fits, and the last places to break within it. */
		while (q < end) {
			size_t l = char_len((const unsigned char *)q, (size_t)(end - q));
			int c = cells((const unsigned char *)q, l);

			if (w + c > avail)
				break;
			if (*q == ' ' && q > p && (q[-1] == ',' || q[-1] == ';'))
				brk = q;
			else if (*q == ' ' && q > p)
				soft = q;
			w += c;
			q += l;
		}
		if (q >= end)
			break;
		/* A break late enough to be worth it: ", " or "; " in the second half, else a
		 * space. */
		if (!brk || (brk - p) < (q - p) / 2)
			brk = soft && (!brk || soft > brk) ? soft : brk;
		if (!brk)
			break; /* nowhere to break: left whole */
		fwrite(p, 1, (size_t)(brk - p), out);
		fputc('\n', out);
		for (size_t i = 0; i < indent + 4; i++)
			fputc(' ', out);
		p = brk + 1;
		while (p < end && *p == ' ')
			p++;
		avail = width - (int)(indent + 4);
	}
	fwrite(p, 1, (size_t)(end - p), out);
}

void wrap_write(FILE *out, const char *text, size_t len, int width)
{
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);

		wrap_line(out, p, n, width);
		if (nl)
			fputc('\n', out);
		p += n + (nl ? 1 : 0);
	}
}

struct wrap_stream {
	FILE *under;
	int width;
	char *buf; /* the line being written, up to its newline */
	size_t len, cap;
};

static ssize_t wrap_stream_write(void *cookie, const char *data, size_t n)
{
	struct wrap_stream *w = cookie;
	size_t done = 0;

	if (w->len + n > w->cap) {
		size_t cap = (w->len + n) * 2;
		char *b = realloc(w->buf, cap);

		if (!b) {
			/* No room to hold the line: it goes as it is, unbroken. */
			fwrite(w->buf, 1, w->len, w->under);
			fwrite(data, 1, n, w->under);
			w->len = 0;
			fflush(w->under);
			return (ssize_t)n;
		}
		w->buf = b;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, data, n);
	w->len += n;
	for (const char *nl; (nl = memchr(w->buf + done, '\n', w->len - done));)
		done = (size_t)(nl - w->buf) + 1;
	if (done) {
		wrap_write(w->under, w->buf, done, w->width);
		memmove(w->buf, w->buf + done, w->len - done);
		w->len -= done;
		fflush(w->under);
	}
	return (ssize_t)n;
}

static int wrap_stream_close(void *cookie)
{
	struct wrap_stream *w = cookie;

	if (w->len)
		wrap_write(w->under, w->buf, w->len, w->width);
	fflush(w->under);
	free(w->buf);
	free(w);
	return 0;
}

FILE *wrap_open(FILE *under, int width)
{
	cookie_io_functions_t io = { .write = wrap_stream_write, .close = wrap_stream_close };
	struct wrap_stream *w;
	FILE *f;

	/* A person reads a terminal; a log or a pipe keeps each message whole, for grep. */
	if (!isatty(fileno(under)) && !getenv("TOKENSCOPE_WRAP"))
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->under = under;
	w->width = width;
	f = fopencookie(w, "w", io);
	if (!f) {
		free(w);
		return NULL;
	}
	setvbuf(f, NULL, _IOLBF, 0);
	return f;
}
