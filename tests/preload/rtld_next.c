/* dlsym(RTLD_NEXT, ...) keeps its meaning under the tracer's dlsym override. */
#include <stdio.h>
#include <unistd.h>

int gmt_test_next_after_b(void);
int gmt_test_a_loaded(void);

int main(void)
{
	int which = gmt_test_next_after_b();

	if (!gmt_test_a_loaded())
		return 1;

	if (which != 1) {
		fprintf(stderr, "rtld_next: dlsym(RTLD_NEXT) from library B found definition %d, expected 1 (library A)\n",
			which);
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
