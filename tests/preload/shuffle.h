/* The racing tests' one helper (double_free.c, vmm_race.c): each racing
 * thread goes through the same objects in an order of its own. */
#ifndef GMT_TEST_SHUFFLE_H
#define GMT_TEST_SHUFFLE_H

#include <stdlib.h>

/* order[0..n) = 0..n-1 in a random order drawn from *seed (Fisher-Yates). */
static inline void shuffle(int *order, int n, unsigned *seed)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(rand_r(seed) % (unsigned)(i + 1)), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
}

#endif /* GMT_TEST_SHUFFLE_H */
