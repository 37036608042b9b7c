/* The harness of the simulator tests (see simtest.h): scenario dispatch, the
 * re-execution that gives each scenario a clean GMTSIM_* environment, failure
 * reporting and a few helpers every scenario uses. */
#define _GNU_SOURCE
#include "simtest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Set in the environment of a process that already runs with its scenario's
 * configuration. Not a GMTSIM_* name, so that the simulator never sees it as
 * one of its own variables. */
#define SIM_MARKER "GMT_SIMTEST_SCENARIO"

static unsigned failures;
static const char *self_path = "/proc/self/exe";

void simtest_fail(const char *file, int line, bool fatal, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	failures++;
	if (fatal) {
		fprintf(stderr, "FAIL (fatal: the rest of the scenario depends on this)\n");
		exit(1);
	}
}

unsigned simtest_failures(void)
{
	return failures;
}

const char *simtest_result_name(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS: return "CUDA_SUCCESS";
	case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
	case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
	case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
	case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
	case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
	case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
	case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
	case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
	case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
	case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
	default: return "?";
	}
}

static bool has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static size_t list_len(const char *const *list)
{
	size_t n = 0;

	while (list && list[n])
		n++;
	return n;
}

/* A scenario's environment: `b` (a caller's extras), `a` (the scenario's own
 * settings), the inherited environment less every GMTSIM_* variable and the
 * marker, and the marker. getenv() returns the first match, so extras win over
 * the scenario's settings, and those over anything inherited. */
static char **scenario_environ(const char *const *a, const char *const *b)
{
	size_t n = list_len((const char *const *)environ) + list_len(a) + list_len(b) + 2;
	char **env = calloc(n, sizeof(*env));
	size_t k = 0;

	if (!env)
		return NULL;
	for (size_t i = 0; b && b[i]; i++)
		env[k++] = (char *)b[i];
	for (size_t i = 0; a && a[i]; i++)
		env[k++] = (char *)a[i];
	for (size_t i = 0; environ[i]; i++)
		if (!has_prefix(environ[i], "GMTSIM_") && !has_prefix(environ[i], SIM_MARKER "="))
			env[k++] = environ[i];
	env[k++] = SIM_MARKER "=1";
	env[k] = NULL;
	return env;
}

static const struct simtest_case *cases_table;
static size_t cases_count;

static const struct simtest_case *find_case(const char *name)
{
	for (size_t i = 0; i < cases_count; i++)
		if (strcmp(cases_table[i].name, name) == 0)
			return &cases_table[i];
	return NULL;
}

int simtest_spawn(const char *name, const char *const *extra_env, int stderr_fd, const char *cwd)
{
	const struct simtest_case *c = find_case(name);
	char *argv[] = { (char *)"simtest", (char *)name, NULL };
	char **env;
	pid_t pid;
	int status;

	if (!c) {
		fprintf(stderr, "simtest: no scenario named %s\n", name);
		return -1;
	}
	env = scenario_environ(c->env, extra_env);
	if (!env)
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		if (cwd && chdir(cwd) != 0)
			_exit(126);
		if (stderr_fd >= 0 && dup2(stderr_fd, STDERR_FILENO) < 0)
			_exit(126);
		execve(self_path, argv, env);
		_exit(127);
	}
	free(env);
	if (pid < 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return status;
}

static int run_case(const struct simtest_case *c)
{
	c->run();
	if (failures) {
		fprintf(stderr, "FAIL %s: %u failed check(s)\n", c->name, failures);
		return 1;
	}
	printf("PASS %s\n", c->name);
	return 0;
}

int simtest_main(int argc, char **argv, const struct simtest_case *cases, size_t ncases)
{
	const struct simtest_case *c;
	const char *marker = getenv(SIM_MARKER);
	char **env;
	int failed = 0;

	cases_table = cases;
	cases_count = ncases;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 1) {
		/* Every scenario, each in its own process with its own environment. */
		for (size_t i = 0; i < ncases; i++) {
			int st;

			if (cases[i].child)
				continue;
			st = simtest_spawn(cases[i].name, NULL, -1, NULL);
			if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
				fprintf(stderr, "FAIL %s (wait status 0x%x)\n", cases[i].name, st);
				failed = 1;
			}
		}
		return failed;
	}
	c = argc == 2 ? find_case(argv[1]) : NULL;
	if (!c) {
		fprintf(stderr, "usage: %s [SCENARIO]; scenarios:", argv[0]);
		for (size_t i = 0; i < ncases; i++)
			fprintf(stderr, " %s", cases[i].name);
		fputc('\n', stderr);
		return 2;
	}
	if (marker && strcmp(marker, "1") == 0)
		return run_case(c);

	/* First entry: become the same program with the scenario's environment. */
	env = scenario_environ(c->env, NULL);
	if (!env)
		return 2;
	fflush(NULL);
	execve(self_path, argv, env);
	fprintf(stderr, "simtest: cannot re-execute %s: %s\n", self_path, strerror(errno));
	return 2;
}

CUcontext simtest_init_context(int device)
{
	CUdevice dev;
	CUcontext ctx = NULL;

	REQUIRE_OK(cuInit(0));
	REQUIRE_OK(cuDeviceGet(&dev, device));
	REQUIRE_OK(cuCtxCreate(&ctx, NULL, 0, dev));
	return ctx;
}

uint64_t simtest_free_bytes(void)
{
	size_t free_bytes = 0, total = 0;

	REQUIRE_OK(cuMemGetInfo_v2(&free_bytes, &total));
	return free_bytes;
}
