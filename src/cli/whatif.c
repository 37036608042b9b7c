/* `gpumemtrace whatif SNAPSHOT [--alloc-conf CONF]... [--device-bytes N]`:
 * replays the PyTorch run a snapshot recorded through the allocator model
 * (analyze/replay.h) under the run's own settings — which must reproduce
 * the run — and under each CONF, and says per setting what it found
 * (docs/whatif.md). Reads, replays, prints; decides nothing itself. */
#define _GNU_SOURCE
#include "cli/launcher.h"

#include "analyze/replay.h"
#include "util/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONFS 32

static const char *bytes(char *buf, size_t len, uint64_t b)
{
	char h[32];

	snprintf(buf, len, "%s (%" PRIu64 " bytes)", gmt__human_bytes(h, sizeof(h), b), b);
	return buf;
}

/* The answers of one setting, as lines on stdout; limit_known: whether
 * the device bytes are. */
static void print_answers(const struct gmt__rp_result *r, bool limit_known)
{
	char a[64], b[64];

	printf("  peak reserved: %s\n", bytes(a, sizeof(a), r->peak_reserved));
	if (!r->has_request)
		printf("  no failing request in the history\n");
	else if (!r->request_reached)
		printf("  the failing request (#%" PRIu64 ", %s): not reached, an earlier request fails\n",
		       r->request_no, bytes(b, sizeof(b), r->request_size));
	else {
		printf("  reserved but unallocated at the failing request: %s\n",
		       bytes(a, sizeof(a), r->unallocated_at_request));
		if (limit_known)
			printf("  the failing request (#%" PRIu64 ", %s): %s\n", r->request_no,
			       bytes(b, sizeof(b), r->request_size), r->request_fits ? "fits" : "does not fit");
		else
			printf("  the failing request (#%" PRIu64 ", %s): not judged, the device bytes are not known\n",
			       r->request_no, bytes(b, sizeof(b), r->request_size));
	}
	if (r->failed && r->fail_no == 0)
		printf("  first request that fails: a tensor live before the history, %s (reserved %s then)\n",
		       bytes(a, sizeof(a), r->fail_size), bytes(b, sizeof(b), r->fail_reserved));
	else if (r->failed)
		printf("  first request that fails: #%" PRIu64 ", %s%s (reserved %s then)\n", r->fail_no,
		       bytes(a, sizeof(a), r->fail_size), r->fail_is_request ? ", the failing request" : "",
		       bytes(b, sizeof(b), r->fail_reserved));
	else
		printf("  first request that fails: none of the %zu replayed\n", r->requests);
	if (r->assumed[0])
		printf("  assumed: %s\n", r->assumed);
}

int cli_whatif(int argc, char **argv)
{
	const char *path = NULL, *confs[MAX_CONFS], *v;
	size_t nconfs = 0;
	uint64_t device_bytes = 0, run_limit, limit;
	bool have_device_bytes = false;
	struct gmt__am_config own, other[MAX_CONFS];
	struct gmt__rp_input in;
	struct gmt__rp_result r;
	json_error_t jerr;
	json_t *doc;
	char err[256], a[64];
	int rc;

	cli_set_context("whatif: ");
	for (int i = 2; i < argc; i++) {
		if ((v = cli_option_value(argc, argv, &i, "--alloc-conf")) != NULL) {
			if (nconfs == MAX_CONFS)
				cli_die(GMT_EXIT_USAGE, "at most %d --alloc-conf", MAX_CONFS);
			confs[nconfs++] = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--device-bytes")) != NULL) {
			if (gmt__parse_size(v, 1, UINT64_MAX, &device_bytes) < 0)
				cli_die(GMT_EXIT_USAGE, "--device-bytes: '%s' is not a size (see gpumemtrace --help)", v);
			have_device_bytes = true;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			cli_help();
			return 0;
		} else if (argv[i][0] == '-' && argv[i][1] != '\0') {
			cli_die(GMT_EXIT_USAGE, "unknown option '%s' (see gpumemtrace --help)", argv[i]);
		} else if (path != NULL) {
			cli_die(GMT_EXIT_USAGE, "one snapshot only ('%s' is a second)", argv[i]);
		} else {
			path = argv[i];
		}
	}
	if (path == NULL)
		cli_die(GMT_EXIT_USAGE, "no snapshot given (see gpumemtrace --help)");
	for (size_t k = 0; k < nconfs; k++) {
		if (gmt__am_config_parse(confs[k], &other[k], err, sizeof(err)) != 0)
			cli_die(GMT_EXIT_USAGE, "--alloc-conf '%s': %s", confs[k], err);
	}
	doc = json_load_file(path, 0, &jerr);
	if (doc == NULL && jerr.line < 1) /* NOTE: jansson's open failures have no line */
		cli_die(GMT_EXIT_USAGE, "%s", jerr.text);
	if (doc == NULL)
		cli_die(GMT_EXIT_USAGE, "%s: not a snapshot (%s, line %d)", path, jerr.text, jerr.line);
	rc = gmt__rp_read(doc, &in, err, sizeof(err));
	json_decref(doc);
	if (rc < 0)
		cli_die(GMT_EXIT_USAGE, "%s: %s", path, err);
	/* The faithful check runs on the run's device bytes, or, where the
	 * snapshot does not say them, on those asked about. */
	run_limit = in.device_bytes_known ? in.device_bytes : have_device_bytes ? device_bytes : GMT_AM_UNLIMITED;
	limit = have_device_bytes ? device_bytes : run_limit;
	if (gmt__am_config_parse(in.conf, &own, err, sizeof(err)) != 0)
		cli_die(GMT_EXIT_USAGE, "%s: the run's own PYTORCH_CUDA_ALLOC_CONF '%s': %s", path, in.conf, err);

	printf("%s: PyTorch %s, device %d, %zu history events%s", path, in.version ? in.version : "?", in.device,
	       in.nev, in.complete ? " since PyTorch's start" : " (the last ones: not since PyTorch's start)");
	if (in.ncalls > 0)
		printf("; the program's empty_cache() calls placed in them: %zu", in.ncalls);
	printf("\n");
	if (in.device_bytes_known)
		printf("device bytes of the run: %s: %s\n", bytes(a, sizeof(a), in.device_bytes), in.device_rule);
	else
		printf("device bytes of the run: not known (no free bytes in the snapshot)\n");
	if (in.allowed_max > 0)
		printf("PyTorch's memory fraction in the run: at most %s reserved (set_per_process_memory_fraction), "
		       "under every setting but one that names per_process_memory_fraction\n",
		       bytes(a, sizeof(a), in.allowed_max));
	if (have_device_bytes)
		printf("device bytes of the answers: %s (--device-bytes)\n", bytes(a, sizeof(a), device_bytes));

	printf("the run's own settings: %s%s%s%s\n", in.conf && in.conf[0] ? in.conf : "PyTorch's defaults",
	       in.conf ? " (from " : " (not recorded: assumed)", in.conf ? (in.conf_from ? in.conf_from : "?") : "",
	       in.conf ? ")" : "");
	rc = gmt__rp_run(&in, &own, true, run_limit, &r, err, sizeof(err));
	if (rc < 0) {
		printf("  not replayed: %s\n", err);
		printf("no answers: the replay could not start from the run's state\n");
		gmt__rp_input_free(&in);
		return 1;
	}
	if (!r.faithful) {
		printf("  not faithful: %s\n", r.diverged);
		if (!in.device_bytes_known && r.has_request)
			printf("  (the run's device bytes are not in the snapshot%s)\n",
			       have_device_bytes ? ": the replay took --device-bytes for them"
						 : ": give them with --device-bytes");
		printf("no answers: a replay that does not reproduce the run says nothing of other settings\n");
		gmt__rp_input_free(&in);
		return 1;
	}
	printf("  faithful: the run's %zu segment events reproduced (kinds, sizes, order), every tensor at the "
	       "run's address\n", r.segment_events);
	if (r.inferred_calls > 0)
		printf("  empty_cache() calls inferred from the run's releases, not placed: %zu (one that released "
		       "nothing then is not made under other settings)\n", r.inferred_calls);
	/* The own settings' answers on the device asked about. */
	if (have_device_bytes && gmt__rp_run(&in, &own, true, limit, &r, err, sizeof(err)) < 0) {
		printf("  not replayed on %s: %s\n", bytes(a, sizeof(a), limit), err);
		gmt__rp_input_free(&in);
		return 1;
	}
	print_answers(&r, limit != GMT_AM_UNLIMITED);
	for (size_t k = 0; k < nconfs; k++) {
		/* An empty (or blank) CONF is PyTorch's defaults, named as the
		 * run's own settings name them. */
		if (confs[k][strspn(confs[k], " \t\n")] == '\0')
			printf("PyTorch's defaults (--alloc-conf \"%s\"):\n", confs[k]);
		else
			printf("%s:\n", confs[k]);
		if (other[k].ignored[0])
			printf("  ignored (not the device cache): %s\n", other[k].ignored);
		rc = gmt__rp_run(&in, &other[k], false, limit, &r, err, sizeof(err));
		if (rc < 0) {
			printf("  not replayed: %s\n", err);
			continue;
		}
		print_answers(&r, limit != GMT_AM_UNLIMITED);
	}
	gmt__rp_input_free(&in);
	return 0;
}
