/* SPDX-License-Identifier: MIT */
/*
 * HTTP's optional whitespace (RFC 9110 section 5.6.3: spaces and horizontal tabs), as it
 * surrounds a field value or a list element.
 */
#ifndef TS_OWS_H
#define TS_OWS_H

#include <stdbool.h>
#include <stddef.h>

static inline bool ows_is(char c)
{
	return c == ' ' || c == '\t';
}

/* [*s, *s + *len) without the optional whitespace on both ends. */
static inline void ows_trim(const char **s, size_t *len)
{
	while (*len && ows_is(**s)) {
		(*s)++;
		(*len)--;
	}
	while (*len && ows_is((*s)[*len - 1]))
		(*len)--;
}

#endif
