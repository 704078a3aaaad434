// SPDX-License-Identifier: MIT
/*
 * lib/dl: dl_bind fills every slot from the library it opens, or none, with why. This test is
 * a dynamic executable, so the library is always opened (the static case is run_static.sh's).
 */
#include <string.h>

#include "check.h"
#include "lib/dl.h"

static double (*fn_cos)(double), (*fn_sin)(double);
static void *fn_missing;

TEST(test_bind_all)
{
	const struct dl_fn fns[] = {
		{ "cos", (void **)&fn_cos, NULL },
		{ "sin", (void **)&fn_sin, NULL },
	};
	char why[128];

	ASSERT_TRUE(dl_possible(), "a dynamic executable");
	ASSERT_TRUE(dl_bind("libm.so.6", fns, 2, why, sizeof(why)) == NULL, "bound");
	ASSERT_TRUE(fn_cos && fn_sin && fn_cos(0.0) == 1.0 && fn_sin(0.0) == 0.0, "callable");
}

TEST(test_bind_none_when_one_is_missing)
{
	const struct dl_fn fns[] = {
		{ "cos", (void **)&fn_cos, NULL },
		{ "no_such_function_here", &fn_missing, NULL },
	};
	char why[128];
	const char *r = dl_bind("libm.so.6", fns, 2, why, sizeof(why));

	ASSERT_TRUE(r == why && strstr(why, "libm.so.6 has no no_such_function_here"), "why");
	ASSERT_TRUE(fn_cos == NULL && fn_missing == NULL, "no slot filled");
}

TEST(test_bind_missing_library)
{
	const struct dl_fn fns[] = { { "cos", (void **)&fn_cos, NULL } };
	char why[128];

	ASSERT_TRUE(dl_bind("libno-such-library.so.0", fns, 1, why, sizeof(why)) == why, "refused");
	ASSERT_TRUE(strstr(why, "libno-such-library.so.0") != NULL, "dlerror's message");
	ASSERT_TRUE(fn_cos == NULL, "no slot filled");
}

int main(void)
{
	return check_run_all();
}
