/* The simulated GPU's configuration (GMTSIM_*, docs/simulator.md), parsed once
 * per library that reads it, and the devices' fixed identity: the driver double
 * and the NVML double each link config.c, so that both see the same devices. */
#ifndef GMTSIM_CONFIG_H
#define GMTSIM_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#define SIM_PAGE_SIZE ((uint64_t)2 << 20)
#define SIM_MAX_DEVICES 16

/* The PCI bus number of device `ordinal` (domain, device and function are 0):
 * what cuDeviceGetAttribute, cuDeviceGetPCIBusId and NVML report. */
#define SIM_PCI_BUS(ordinal) (0x18u + (unsigned)(ordinal))

/* GMTSIM_OTHER_PID's default: Linux's pid_max is at most 2^22 (PID_MAX_LIMIT)
 * and pids stay below it, so no real process has this pid. */
#define SIM_DEFAULT_OTHER_PID 4194304u

struct sim_config {
	int ndevices;
	uint64_t memory[SIM_MAX_DEVICES]; /* capacity, whole pages (at least one) */
	uint64_t other[SIM_MAX_DEVICES];  /* other processes' bytes, whole pages, at most memory[] */
	uint64_t context_bytes;           /* as given; the driver rounds it up to pages */
	unsigned other_pid;               /* the pid NVML reports for the other processes */
	int driver_version;               /* GMTSIM_DRIVER_VERSION; 0: unset */
	const char *ledger_dir; /* NULL: no ledger files */
	bool invalid;           /* a variable was invalid (one line on stderr said which) */
};

/* The parsed configuration (parsed once, on first use; thread-safe). */
const struct sim_config *gmtsim__config(void);

#endif /* GMTSIM_CONFIG_H */
