/* The simulated driver's own interface, beside the CUDA API it implements.
 * Only the simulated libcuda.so.1 (sim/driver/) provides it; a program that must
 * also run on a real driver looks it up with dlsym(RTLD_DEFAULT, ...). */
#ifndef GMTSIM_H
#define GMTSIM_H

/* Write the simulator's ledger (docs/simulator.md: every live allocation, pool,
 * reservation and mapping, totals and call counts) to `path` as JSON, with
 * reason "api". Returns 0 or a negative errno. Thread-safe. */
int gmtsim_ledger_write(const char *path);

#endif /* GMTSIM_H */
