/* The simulated GPU's configuration: the GMTSIM_* variables (docs/simulator.md,
 * "Configuration"), parsed once, checked and normalised to whole pages. Linked
 * into the driver double and the NVML double, each with its own copy. */
#define _GNU_SOURCE
#include "config.h"

#include "util/parse.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct sim_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static void config_error(const char *name, const char *value, const char *what)
{
	fprintf(stderr, "gmtsim: %s: %s '%s'\n", name, what, value);
	config.invalid = true;
}

/* A size, or a comma list with one size per device, into out[0..n). */
static void parse_size_list(const char *name, uint64_t *out, int n)
{
	const char *s = getenv(name);
	char buf[512];
	char *save = NULL, *tok;
	int count = 0;

	/* no device to size: a machine without GPUs ignores them */
	if (s == NULL || n == 0)
		return;
	if (strlen(s) >= sizeof(buf)) {
		config_error(name, s, "value too long");
		return;
	}
	memcpy(buf, s, strlen(s) + 1);
	for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (count == n) {
			config_error(name, s, "more values than GMTSIM_DEVICES in");
			return;
		}
		if (gmt__parse_size(tok, 0, (uint64_t)1 << 50, &v) < 0) {
			config_error(name, s, "invalid size");
			return;
		}
		out[count++] = v;
	}
	if (count == 0) {
		config_error(name, s, "invalid size");
		return;
	}
	if (count != 1 && count != n) {
		config_error(name, s, "need one size or one per device, got");
		return;
	}
	for (int i = count; i < n; i++)
		out[i] = out[0];
}

static void config_parse(void)
{
	const char *s;
	uint64_t v;

	config.ndevices = 1;
	config.other_pid = SIM_DEFAULT_OTHER_PID;
	for (int i = 0; i < SIM_MAX_DEVICES; i++)
		config.memory[i] = (uint64_t)16 << 30;

	s = getenv("GMTSIM_DEVICES");
	if (s != NULL) {
		if (gmt__parse_u64(s, 0, SIM_MAX_DEVICES, &v) < 0)
			config_error("GMTSIM_DEVICES", s, "not a device count from 0 to 16:");
		else
			config.ndevices = (int)v;
	}
	parse_size_list("GMTSIM_MEMORY", config.memory, config.ndevices);
	parse_size_list("GMTSIM_OTHER_PROCESSES", config.other, config.ndevices);
	s = getenv("GMTSIM_CONTEXT_BYTES");
	if (s != NULL && gmt__parse_size(s, 0, (uint64_t)1 << 50, &config.context_bytes) < 0)
		config_error("GMTSIM_CONTEXT_BYTES", s, "invalid size");
	s = getenv("GMTSIM_DRIVER_VERSION");
	if (s != NULL) {
		if (gmt__parse_u64(s, 1000, 99999, &v) < 0)
			config_error("GMTSIM_DRIVER_VERSION", s, "not a version like 13000:");
		else
			config.driver_version = (int)v;
	}
	/* NVML reports pids as unsigned int; 0 is no process. */
	s = getenv("GMTSIM_OTHER_PID");
	if (s != NULL) {
		if (gmt__parse_u64(s, 1, UINT32_MAX, &v) < 0)
			config_error("GMTSIM_OTHER_PID", s, "not a pid from 1 to 4294967295:");
		else
			config.other_pid = (unsigned)v;
	}
	for (int i = 0; i < config.ndevices; i++) {
		config.memory[i] -= config.memory[i] % SIM_PAGE_SIZE;
		if (config.memory[i] == 0) {
			config_error("GMTSIM_MEMORY", getenv("GMTSIM_MEMORY"),
				     "capacity below one 2 MiB page in");
			break;
		}
		/* Other processes hold whole pages, never more than the device has. */
		config.other[i] = (config.other[i] + SIM_PAGE_SIZE - 1) / SIM_PAGE_SIZE * SIM_PAGE_SIZE;
		if (config.other[i] > config.memory[i])
			config.other[i] = config.memory[i];
	}
	s = getenv("GMTSIM_LEDGER_DIR");
	if (s != NULL && s[0] != '\0')
		config.ledger_dir = s;
}

const struct sim_config *gmtsim__config(void)
{
	pthread_once(&config_once, config_parse);
	return &config;
}
