/* The tensor level of a snapshot's model for the live metrics (metrics.h):
 * the metrics file is written every few seconds, but a framework hands its
 * tensors over only at snapshots, so the tracer keeps what the latest one
 * said (tracer/metrics.c) and the file carries it with its time. */
#define _GNU_SOURCE
#include "report/metrics.h"

#include "analyze/model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Index 0 of the slots gathers the tensors without frames; i > 0 is site i. */
static const char *slot_label(const struct gmt__sites *sites, uint32_t slot)
{
	return slot > 0 ? sites->labels[slot - 1] : "(no stack recorded)";
}

static uint32_t slot_of(const struct gmt__model *m, uint32_t tensor_stack)
{
	const struct gmt__stack_site *ss = gmt__sites_of(&m->stack_sites, m->ids.v, gmt__tensor_stack_id(tensor_stack));

	return ss != NULL ? ss->site : 0;
}

/* The live tensors by site, into out->sites: one entry a site. */
static int live_sites(const struct gmt__model *m, struct gmt__metrics_tensors *out)
{
	const struct gmt__tensors *t = &m->tensors;
	size_t nslots = (size_t)m->stack_sites.nsites + 1;
	uint64_t *bytes = calloc(nslots, sizeof(*bytes)), *count = calloc(nslots, sizeof(*count));
	int r = -ENOMEM;

	if (bytes == NULL || count == NULL)
		goto out;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t slot = slot_of(m, t->v[i].stack);

		bytes[slot] += t->v[i].size;
		count[slot]++;
	}
	out->sites = calloc(nslots, sizeof(*out->sites));
	if (out->sites == NULL)
		goto out;
	for (uint32_t slot = 0; slot < nslots; slot++) {
		struct gmt__metrics_site *s = &out->sites[out->nsites];

		if (count[slot] == 0)
			continue;
		*s = (struct gmt__metrics_site){ strdup(slot_label(&m->stack_sites, slot)), bytes[slot], count[slot], 0 };
		if (s->label == NULL)
			goto out;
		out->nsites++;
	}
	r = 0;
out:
	free(bytes);
	free(count);
	return r;
}

/* The replay's sites that keep growing (as the driver's growth suspects),
 * what each gained: into out->suspects, one entry a stack (the text adds up
 * those of one label). */
static int suspects(const struct gmt__model *m, struct gmt__metrics_tensors *out)
{
	const struct gmt__tensors *t = &m->tensors;

	if (t->history == NULL || t->nsites == 0)
		return 0;
	out->suspects = calloc(t->nsites, sizeof(*out->suspects));
	if (out->suspects == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < t->nsites; i++) {
		const struct gmt__site *s = gmt__history_site(t->history, t->sites[i].id);
		struct gmt__metrics_site *ms = &out->suspects[out->nsuspects];
		uint32_t rises, falls;
		uint64_t growth = 0;

		if (s == NULL || !gmt__site_growing(t->history, s, &rises, &falls, &growth) || growth == 0)
			continue;
		*ms = (struct gmt__metrics_site){ strdup(slot_label(&m->stack_sites, slot_of(m, t->sites[i].id))),
						  s->live_bytes, s->live_count, growth };
		if (ms->label == NULL)
			return -ENOMEM;
		out->nsuspects++;
	}
	return 0;
}

int gmt__metrics_tensors_of(const struct gmt__model *m, uint64_t time_ns, struct gmt__metrics_tensors *out)
{
	const struct gmt__tensors *t = &m->tensors;
	int r;

	memset(out, 0, sizeof(*out));
	if (!t->known)
		return -ENOENT;
	out->time_ns = time_ns;
	for (int i = 0; i < t->ndev && out->ndev < GMT_METRICS_MAX_DEVICES; i++)
		out->dev[out->ndev++] = (struct gmt__metrics_tensor_device){ t->dev[i].device, t->dev[i].tensor_bytes,
									     t->dev[i].tensor_count };
	r = live_sites(m, out);
	if (r == 0)
		r = suspects(m, out);
	if (r < 0)
		gmt__metrics_tensors_free(out);
	return r;
}

void gmt__metrics_tensors_free(struct gmt__metrics_tensors *t)
{
	for (size_t i = 0; t->sites != NULL && i < t->nsites; i++)
		free((char *)t->sites[i].label);
	for (size_t i = 0; t->suspects != NULL && i < t->nsuspects; i++)
		free((char *)t->suspects[i].label);
	free(t->sites);
	free(t->suspects);
	memset(t, 0, sizeof(*t));
}
