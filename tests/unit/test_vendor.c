// SPDX-License-Identifier: MIT
/*
 * loader/vendor: every GPU vendor's row is whole (its libraries of its own kind and within a
 * file's offsets, its sampler's calls, its device-time library named in full or not at all),
 * each library table is found back to its row, and every file a row names by its start is one
 * that bpf/lib/proctree.bpf.h's hold_wanted holds a process at (read from the tree: the test runs
 * from its root, as tests/run.sh starts it).
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "loader/vendor.h"

TEST(test_rows_whole)
{
	ASSERT_TRUE(vendor_count() >= 1 && vendor_count() <= VENDORS_MAX, "rows");
	ASSERT_TRUE(vendor_row(vendor_count()) == NULL, "past the last row");
	for (size_t i = 0; i < vendor_count(); i++) {
		const struct vendor *v = vendor_row(i);
		const struct sampler_ops *s = v->sampler;
		const struct vendor_devtime *d = &v->devtime;
		bool any = d->what || d->check_name || d->file_prefix || d->file_name ||
			   d->path_env || d->inject_env;
		bool all = d->what && d->check_name && d->file_prefix && d->file_name &&
			   d->path_env && d->inject_env;

		ASSERT_TRUE(v->name && v->check_name && v->nlibs > 0, v->name);
		for (size_t k = 0; k < v->nlibs; k++) {
			const struct libhooks *l = &v->libs[k];

			ASSERT_STREQ(l->what, v->name, "a library of the vendor's kind");
			ASSERT_TRUE(l->traces && l->n > 0 && l->n <= LIBHOOKS_FNS_MAX,
				    "its functions");
			ASSERT_TRUE(l->file_prefix || l->exe_too,
				    "found by name or in executables");
			for (size_t f = 0; f < l->n; f++)
				ASSERT_TRUE(l->fns[f].name && l->fns[f].entry != KERNEL_PROBE_NONE,
					    "a function with its entry's program");
		}
		if (s)
			ASSERT_TRUE(s->start && s->latest && s->say_why && s->stop &&
					s->check_name && s->library && s->check_ok && s->check_off,
				    "every call of its sampler, and its line in tokenscope check");
		ASSERT_TRUE(any == all, "its device-time library named in full, or not at all");
		if (all)
			ASSERT_TRUE(
			    !strncmp(d->file_name, d->file_prefix, strlen(d->file_prefix)),
			    "the file run gives a process is the one its maps are searched for");
	}
}

TEST(test_vendor_of)
{
	static const struct libhooks other = { "TLS", "TLS plaintext", "libssl.so", true, NULL, 0 };

	for (size_t i = 0; i < vendor_count(); i++)
		for (size_t k = 0; k < vendor_row(i)->nlibs; k++)
			ASSERT_EQ(vendor_of(&vendor_row(i)->libs[k]), (long long)i, "its row");
	ASSERT_EQ(vendor_of(&other), -1, "a library of no vendor");
}

TEST(test_names)
{
	char want[256] = "", got[256], small[3];

	for (size_t i = 0; i < vendor_count(); i++)
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%s", i ? " or " : "",
			 vendor_row(i)->name);
	vendor_names(got, sizeof(got));
	ASSERT_STREQ(got, want, "joined by \" or \"");
	vendor_names(small, sizeof(small));
	ASSERT_EQ(strlen(small), 2, "cut to the buffer");
}

/* Whether hold_wanted names a start of the file name that begins with prefix. */
static bool held(const char *src, const char *prefix)
{
	const char *p = strstr(src, "hold_wanted(int fd)");

	while (p && (p = strstr(p, "NAME_STARTS(name, \""))) {
		const char *s = p + strlen("NAME_STARTS(name, \"");
		const char *e = strchr(s, '"');

		if (e && !strncmp(prefix, s, (size_t)(e - s)))
			return true;
		p = s;
	}
	return false;
}

TEST(test_held_at_mapping)
{
	static char src[64 * 1024];
	FILE *f = fopen("bpf/lib/proctree.bpf.h", "r");
	size_t n;

	if (!f) {
		SKIP("not run from the tree's root");
		return;
	}
	n = fread(src, 1, sizeof(src) - 1, f);
	fclose(f);
	src[n] = 0;
	for (size_t i = 0; i < vendor_count(); i++) {
		const struct vendor *v = vendor_row(i);

		for (size_t k = 0; k < v->nlibs; k++)
			if (v->libs[k].file_prefix)
				ASSERT_TRUE(held(src, v->libs[k].file_prefix),
					    v->libs[k].file_prefix);
		if (v->devtime.file_prefix)
			ASSERT_TRUE(held(src, v->devtime.file_prefix), v->devtime.file_prefix);
	}
}

int main(void)
{
	return check_run_all();
}
