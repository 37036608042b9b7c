/* The small harness of the simulator tests (tests/sim): named scenarios, each run
 * in a process whose environment holds exactly the GMTSIM_* variables the scenario
 * names, and checks that print both operands when they fail. */
#ifndef GMT_SIMTEST_H
#define GMT_SIMTEST_H

#include <cuda.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SIM_MiB ((uint64_t)1 << 20)
#define SIM_GiB ((uint64_t)1 << 30)
#define SIM_PAGE (2 * SIM_MiB)

/* One scenario. env is a NULL-terminated list of "NAME=value" strings: the
 * scenario runs with every inherited GMTSIM_* variable dropped and these set
 * (the simulator reads its configuration once, so this is done by re-executing
 * the test program, never by setenv). run returns nothing: failed checks are
 * counted, and the scenario passes when none failed. */
struct simtest_case {
	const char *name;
	const char *const *env;
	void (*run)(void);
	bool child; /* only started by another scenario (simtest_spawn) */
};

/* main() of every test program: runs the scenario named by argv[1] (or, with no
 * argument, every scenario but the child ones in turn, each in its own
 * process). Exit status 0 when it passed, 1 when a check failed, 2 on a usage
 * error. */
int simtest_main(int argc, char **argv, const struct simtest_case *cases, size_t ncases);

/* Runs scenario `name` of this program in a child process with the scenario's
 * environment plus `extra_env` (NULL-terminated "NAME=value" list, may be NULL),
 * its stderr sent to `stderr_fd` (-1: inherited) and its working directory set
 * to `cwd` (NULL: inherited). Returns the wait status, or -1 if it could not
 * be started. */
int simtest_spawn(const char *name, const char *const *extra_env, int stderr_fd, const char *cwd);

/* Records a failure (fatal: exit(1) at once, for setup steps without which the
 * rest of a scenario means nothing). */
__attribute__((format(printf, 4, 5)))
void simtest_fail(const char *file, int line, bool fatal, const char *fmt, ...);

/* Number of failed checks in this process so far. */
unsigned simtest_failures(void);

/* "CUDA_ERROR_OUT_OF_MEMORY" for the results the tests meet, "?" otherwise. */
const char *simtest_result_name(CUresult r);

/* Written into output pointers before a call that must leave them untouched
 * (the driver leaves the output of a failed allocation as the caller set it). */
#define SIM_SENTINEL ((CUdeviceptr)0x5eed5eed5eed5eedull)

#define SIM_CMP_(fatal, type, fmt, a, op, b)                                     \
	do {                                                                     \
		type sim_a_ = (type)(a);                                         \
		type sim_b_ = (type)(b);                                         \
		if (!(sim_a_ op sim_b_))                                         \
			simtest_fail(__FILE__, __LINE__, fatal,                  \
				     "expected %s %s %s, but %s = " fmt ", %s = " fmt, \
				     #a, #op, #b, #a, sim_a_, #b, sim_b_);        \
	} while (0)

/* Signed and unsigned integers (unsigned values print in decimal; sizes and
 * addresses read better in hex, so CHECK_X prints both ways). */
#define CHECK_INT(a, op, b) SIM_CMP_(false, intmax_t, "%jd", a, op, b)
#define CHECK_U64(a, op, b) SIM_CMP_(false, uintmax_t, "%ju", a, op, b)
#define CHECK_X(a, op, b) SIM_CMP_(false, uintmax_t, "0x%jx", a, op, b)
#define CHECK_PTR(a, op, b) SIM_CMP_(false, const void *, "%p", a, op, b)
#define REQUIRE_INT(a, op, b) SIM_CMP_(true, intmax_t, "%jd", a, op, b)
#define REQUIRE_U64(a, op, b) SIM_CMP_(true, uintmax_t, "%ju", a, op, b)

#define CHECK_STR(a, b)                                                          \
	do {                                                                     \
		const char *sim_a_ = (a), *sim_b_ = (b);                         \
		if (!sim_a_ || !sim_b_ || strcmp(sim_a_, sim_b_) != 0)           \
			simtest_fail(__FILE__, __LINE__, false,                  \
				     "expected %s == %s, but \"%s\" != \"%s\"",  \
				     #a, #b, sim_a_ ? sim_a_ : "(null)",         \
				     sim_b_ ? sim_b_ : "(null)");                \
	} while (0)

#define SIM_CU_(fatal, call, expected)                                           \
	do {                                                                     \
		CUresult sim_r_ = (call);                                        \
		CUresult sim_e_ = (expected);                                    \
		if (sim_r_ != sim_e_)                                            \
			simtest_fail(__FILE__, __LINE__, fatal,                  \
				     "%s returned %d (%s), expected %d (%s)",    \
				     #call, (int)sim_r_,                         \
				     simtest_result_name(sim_r_), (int)sim_e_,   \
				     simtest_result_name(sim_e_));               \
	} while (0)

/* A driver call and the result it must give; REQUIRE_CU for setup steps. */
#define CHECK_CU(call, expected) SIM_CU_(false, call, expected)
#define REQUIRE_CU(call, expected) SIM_CU_(true, call, expected)
#define REQUIRE_OK(call) SIM_CU_(true, call, CUDA_SUCCESS)

#define CHECK(cond)                                                              \
	do {                                                                     \
		if (!(cond))                                                     \
			simtest_fail(__FILE__, __LINE__, false, "check failed: %s", #cond); \
	} while (0)

/* --- helpers shared by the scenarios ------------------------------------- */

/* cuInit(0), then a new context on `device`, made current. */
CUcontext simtest_init_context(int device);

/* cuMemGetInfo_v2's free bytes for the current context (a failed call is a
 * fatal check failure). */
uint64_t simtest_free_bytes(void);

#endif /* GMT_SIMTEST_H */
