/* Library A of the RTLD_NEXT test: the definition after B's in the search order. */
int gmt_test_which(void);

int gmt_test_which(void)
{
	return 1;
}

/* Referenced by the program, so that the linker keeps A after B. */
int gmt_test_a_loaded(void);

int gmt_test_a_loaded(void)
{
	return 1;
}
