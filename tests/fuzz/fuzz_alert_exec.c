// SPDX-License-Identifier: MIT
/*
 * The command --alert-exec runs (alert_cmd_build, user/sinks/alert.c): the command line and the
 * environment the child is given, built before fork from the tracer's environment, the user's
 * command, a rule's text (as given, and as alert_parse writes it back), the state, the value
 * and the cause.
 *
 * Input: u8 number of environment entries (at most FUZZ_ENV_MAX), then NUL-ended strings: the
 * command, the rule, the state, the value, the cause, then the entries.
 *
 * Properties: the command line is `sh -c COMMAND` with the command exactly as given (no value
 * ever reaches it); the environment holds every entry given, in order, except those that set
 * one of the four TOKENSCOPE_ALERT_* variables (an entry without '=', or with a longer name, is
 * kept), then each of the four exactly once with exactly its value; nothing else, and a NULL at
 * the end.
 */
#include "fuzz.h"
#include "sinks/alert.h"

#define FUZZ_ENV_MAX 32
#define FUZZ_STRING_MAX 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[ALERT_CMD_VARS] = {
	"TOKENSCOPE_ALERT_RULE",
	"TOKENSCOPE_ALERT_STATE",
	"TOKENSCOPE_ALERT_VALUE",
	"TOKENSCOPE_ALERT_CAUSE",
};

/* Which of the four variables the entry sets, or -1. */
FUZZ_CHECKER static int sets(const char *e)
{
	for (int i = 0; i < ALERT_CMD_VARS; i++) {
		size_t n = strlen(names[i]);

		if (!strncmp(e, names[i], n) && e[n] == '=')
			return i;
	}
	return -1;
}

FUZZ_CHECKER static void check(const struct alert_cmd *c, const char *exec, char **env, size_t nenv,
			       const char *const values[ALERT_CMD_VARS])
{
	size_t k = 0;

	FUZZ_CHECK(!strcmp(c->argv[0], "sh") && !strcmp(c->argv[1], "-c") && c->argv[3] == NULL,
		   "not sh -c");
	FUZZ_CHECK(c->argv[2] == exec || !strcmp(c->argv[2], exec), "the command changed");
	for (size_t i = 0; i < nenv; i++) {
		if (sets(env[i]) >= 0)
			continue;
		FUZZ_CHECK(c->envp[k] && !strcmp(c->envp[k], env[i]),
			   "inherited entry %zu (\"%s\") not kept in its place", i, env[i]);
		k++;
	}
	for (int v = 0; v < ALERT_CMD_VARS; v++, k++) {
		size_t n = strlen(names[v]);

		FUZZ_CHECK(c->envp[k] && sets(c->envp[k]) == v, "%s not at its place", names[v]);
		FUZZ_CHECK(!strcmp(c->envp[k] + n + 1, values[v]), "%s is \"%s\", not \"%s\"",
			   names[v], c->envp[k] + n + 1, values[v]);
	}
	FUZZ_CHECK(c->envp[k] == NULL, "more entries than given");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = fuzz_in(data, size);
	size_t nenv = fuzz_u8(&in) % (FUZZ_ENV_MAX + 1);
	char *s[5], *env[FUZZ_ENV_MAX + 1];
	const char *values[ALERT_CMD_VARS];
	struct alert_rule r;
	struct alert_cmd c;
	char err[256];

	for (int i = 0; i < 5; i++)
		s[i] = fuzz_str(&in, FUZZ_STRING_MAX);
	for (size_t i = 0; i < nenv; i++)
		env[i] = fuzz_str(&in, FUZZ_STRING_MAX);
	env[nenv] = NULL;
	for (int i = 0; i < ALERT_CMD_VARS; i++)
		values[i] = s[i + 1];
	if (alert_cmd_build(&c, s[0], env, s[1], s[2], s[3], s[4]) == 0) {
		check(&c, s[0], env, nenv, values);
		alert_cmd_free(&c);
	}
	/* A rule as alert_parse writes it back, which is what the command is told. */
	if (alert_parse(s[1], &r, err, sizeof(err)) == 0) {
		values[0] = r.text;
		if (alert_cmd_build(&c, s[0], env, r.text, s[2], s[3], s[4]) == 0) {
			check(&c, s[0], env, nenv, values);
			alert_cmd_free(&c);
		}
	}
	for (int i = 0; i < 5; i++)
		free(s[i]);
	for (size_t i = 0; i < nenv; i++)
		free(env[i]);
	return 0;
}
