/* The public header compiles on its own (pedantic, in each C standard it
 * promises) and its version macros agree with each other. */
#include <gpumemtrace.h>

#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int main(void)
{
	const char *built = STR(GMT_VERSION_MAJOR) "." STR(GMT_VERSION_MINOR) "." STR(GMT_VERSION_PATCH);

	if (strcmp(built, GMT_VERSION_STRING) != 0) {
		fprintf(stderr, "GMT_VERSION_STRING \"%s\" != \"%s\"\n", GMT_VERSION_STRING, built);
		return 1;
	}
	if (strcmp(GMT_VERSION_STRING, GMT_PROJECT_VERSION) != 0) {
		fprintf(stderr, "header says %s, meson.build says %s\n", GMT_VERSION_STRING,
			GMT_PROJECT_VERSION);
		return 1;
	}
	if (GMT_VERSION != GMT_VERSION_MAJOR * 10000 + GMT_VERSION_MINOR * 100 + GMT_VERSION_PATCH) {
		fprintf(stderr, "GMT_VERSION %d inconsistent\n", GMT_VERSION);
		return 1;
	}
	return 0;
}
