#ifndef GMT_SYMTEST_LIB_H
#define GMT_SYMTEST_LIB_H

/* Calls fn from symtest_lib.c, line symtest_lib_call_line. */
void symtest_lib_call(void (*fn)(void));
extern const int symtest_lib_call_line;
extern volatile int symtest_lib_sink;

#endif
