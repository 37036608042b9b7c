/* The failure of a debug assertion (check.h). */
#include "util/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

_Noreturn void gmt__check_failed(const char *cond, const char *file, int line)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "gpumemtrace: internal check failed: %s (%s:%d)\n", cond, file, line);

	if (n > 0)
		(void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
	abort();
}
