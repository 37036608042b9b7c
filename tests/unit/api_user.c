/* A program built against the installed header through pkg-config: prints
 * what gmt_live_bytes answers ("rc -38" untraced: -ENOSYS). */
#include <gpumemtrace.h>

#include <stdio.h>

int main(void)
{
	unsigned long long bytes = 0;
	int rc = gmt_live_bytes(GMT_ALL_DEVICES, &bytes);

	printf("rc %d bytes %llu\n", rc, bytes);
	return 0;
}
