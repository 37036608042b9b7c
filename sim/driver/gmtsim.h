/* The simulated driver's own interface, beside the CUDA API it implements.
 * Only the simulated libcuda.so.1 (sim/driver/) provides it; a program that must
 * also run on a real driver looks it up with dlsym(RTLD_DEFAULT, ...). */
#ifndef GMTSIM_H
#define GMTSIM_H

/* Write the simulator's ledger (docs/simulator.md: every live allocation, pool,
 * reservation and mapping, totals and call counts) to `path` as JSON, with
 * reason "api". Returns 0 or a negative errno. Thread-safe. */
int gmtsim_ledger_write(const char *path);

/* One device's memory as the driver's model holds it, in bytes (all multiples
 * of the 2 MiB page): total and free are cuMemGetInfo_v2's; self is the pages
 * this process holds (allocations, pool segments, VMM handles, arrays, its
 * contexts' share), other those of other processes (GMTSIM_OTHER_PROCESSES).
 * total_bytes - free_bytes == self_bytes + other_bytes. */
struct gmtsim_usage {
	unsigned long long total_bytes;
	unsigned long long free_bytes;
	unsigned long long self_bytes;
	unsigned long long other_bytes;
};

/* The usage of device `device` (an ordinal) at this instant, for the NVML double
 * (sim/nvml/), which finds this function with dlopen("libcuda.so.1",
 * RTLD_NOLOAD) and dlsym. Unlike cuMemGetInfo_v2 it needs no current context.
 * Returns 0, -EINVAL (out is NULL, or no such device) or -ESRCH (this process
 * holds no CUDA state: cuInit has not succeeded, or CUDA was lost by fork or
 * torn down at exit). Thread-safe: takes the driver's lock. */
int gmtsim_device_usage(int device, struct gmtsim_usage *out);

#endif /* GMTSIM_H */
