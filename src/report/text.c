/* The text reports on stderr: the leak check's report and the few lines an
 * out-of-memory snapshot prints (verdict, top sites). Made from the same
 * analysis as the document, whether or not the file could be written. */
#define _GNU_SOURCE
#include "report/document.h"

#include "analyze/diagnose.h"
#include "record/event.h"
#include "record/pystack.h"
#include "record/stacks.h"
#include "util/log.h"
#include "util/parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct text {
	char *s;
	size_t n, cap;
	bool failed;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int need;

	if (t->failed)
		return;
	va_start(ap, fmt);
	need = vsnprintf(t->s != NULL ? t->s + t->n : NULL, t->s != NULL ? t->cap - t->n : 0, fmt, ap);
	va_end(ap);
	if (need < 0) {
		t->failed = true;
		return;
	}
	if (t->s == NULL || (size_t)need >= t->cap - t->n) {
		size_t cap = t->cap ? t->cap : 4096;
		char *bigger;

		while (cap - t->n <= (size_t)need)
			cap *= 2;
		bigger = realloc(t->s, cap);
		if (bigger == NULL) {
			t->failed = true;
			return;
		}
		t->s = bigger;
		t->cap = cap;
		va_start(ap, fmt);
		vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
		va_end(ap);
	}
	t->n += (size_t)need;
}

/* A name the program made (a function, a file, a site's label, a
 * framework's words, a path) for a line of a report: escaped as every line
 * of the log is (gmt__log_escape) before the report is put together, so a
 * newline in it cannot split the report into a line of its own (a forged
 * "snapshot:"). NAME_MAX_TEXT: a report line is cut at about 1 KiB anyway. */
#define NAME_MAX_TEXT 512
struct name_buf {
	char s[NAME_MAX_TEXT];
};

static const char *esc(struct name_buf *b, const char *name)
{
	gmt__log_escape(b->s, sizeof(b->s), name, false);
	return b->s;
}

/* Frames as LeakSanitizer prints them. */
struct text_frames {
	struct text *t;
	int k;
};

static void text_native(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct text_frames *tf = ctx;
	const char *mod = gmt__base_name(f->module);
	struct name_buf b;

	if (tf->k >= LEAK_REPORT_FRAMES) {
		tf->k++;
		return;
	}
	text_add(tf->t, "    #%d 0x%llx in %s", tf->k++, (unsigned long long)f->ip,
		 function != NULL ? esc(&b, function) : "??");
	if (sym != NULL && sym->file != NULL && sym->line > 0)
		text_add(tf->t, " %s:%d", esc(&b, sym->file), sym->line);
	if (f->module != NULL)
		text_add(tf->t, " (%s+0x%llx)", mod != NULL ? esc(&b, mod) : "?", (unsigned long long)(f->ip - f->base));
	text_add(tf->t, "\n");
}

static void text_python(void *ctx, uintptr_t word)
{
	struct text_frames *tf = ctx;
	const char *function = NULL, *file = NULL;
	struct name_buf b, c;
	int line = 0;

	if (tf->k >= LEAK_REPORT_FRAMES) {
		tf->k++;
		return;
	}
	(void)gmt__py_frame(word, &function, &file, &line);
	text_add(tf->t, "    #%d in %s %s:%d [Python]\n", tf->k++, function != NULL ? esc(&b, function) : "??",
		 file != NULL ? esc(&c, file) : "?", line);
}

/* "device memory on device 0", "device and managed memory on devices 0, 1". */
static void group_what(const struct gmt__leak_work *lw, const struct gmt__leak_group *g, char *buf, size_t len)
{
	size_t at = 0;
	int nk = 0, nd = 0;
	int16_t devs[4];

	buf[0] = '\0';
	for (int k = 0; k < GMT_KIND_COUNT; k++) {
		if (g->kinds[k] == 0)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s", nk++ ? " and " : "", gmt__kind_name((enum gmt__kind)k));
		if (at >= len)
			return;
	}
	at += (size_t)snprintf(buf + at, len - at, " memory");
	for (uint64_t i = 0; i < g->count && at < len; i++) {
		int16_t d = lw->items[lw->order[g->first + i]].device;
		int k;

		for (k = 0; k < nd && devs[k] != d; k++)
			;
		if (k < nd || nd == 4)
			continue;
		devs[nd++] = d;
		if (d < 0)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%d", nd == 1 ? " on device " : ", ", d);
	}
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

static void rule_words(const struct gmt__supp *supp, uint32_t rule, char *buf, size_t len)
{
	const struct gmt__supp_rule *r = &supp->v[rule];
	struct name_buf b, c;
	char text[256];

	gmt__supp_rule_text(r, text, sizeof(text));
	if (r->line > 0)
		snprintf(buf, len, "%s (%s:%d)", esc(&b, text), esc(&c, r->source), r->line);
	else
		snprintf(buf, len, "%s (built-in: %s)", esc(&b, text), r->why != NULL ? r->why : "?");
}

static void leak_report(struct gmt__leak_work *lw, struct gmt__frame_cache *cache)
{
	const struct gmt__snapshot_leaks *in = lw->in;
	struct text t = { 0 };
	char a[32], b[32], what[160], where[2 * NAME_MAX_TEXT + 64];
	struct name_buf nb;
	size_t shown = 0, brief = 0, counted_groups = 0;

	if (in->supp_error != NULL)
		text_add(&t, "leak check: suppressions not applied: %s\n", esc(&nb, in->supp_error));
	if (!lw->scan.done)
		text_add(&t, "leak check: no pointer scan (%s): every allocation nobody freed is 'leaked'\n",
			 lw->scan.why != NULL ? esc(&nb, lw->scan.why) : "?");
	for (size_t i = 0; i < lw->ngroups; i++)
		counted_groups += lw->groups[i].counted;
	if (lw->total_count[TOTAL_COUNTED] > 0)
		text_add(&t, "leak check: %llu allocation%s of %s live at exit count as leaks, from %zu site%s:\n",
			 (unsigned long long)lw->total_count[TOTAL_COUNTED], plural(lw->total_count[TOTAL_COUNTED]),
			 gmt__human_bytes(a, sizeof(a), lw->total_bytes[TOTAL_COUNTED]), counted_groups,
			 counted_groups == 1 ? "" : "s");
	for (size_t i = 0; i < lw->ngroups && lw->groups[i].counted; i++) {
		const struct gmt__leak_group *g = &lw->groups[i];
		int depth = 0, ntags = 0;
		const uintptr_t *ips;

		if (shown++ == LEAK_REPORT_SITES) {
			text_add(&t, "... and %zu more site%s (the exit snapshot lists them all)\n",
				 counted_groups - LEAK_REPORT_SITES, counted_groups - LEAK_REPORT_SITES == 1 ? "" : "s");
			break;
		}
		group_what(lw, g, what, sizeof(what));
		text_add(&t, "\n%s %s in %llu allocation%s of %s", g->cls == GMT_LEAK_REFERENCED ? "Still referenced:" :
			 g->cls == GMT_LEAK_CACHED ? "Cached:" : "Leaked:", gmt__human_bytes(a, sizeof(a), g->bytes),
			 (unsigned long long)g->count, plural(g->count), what);
		if (g->cls == GMT_LEAK_REFERENCED) {
			gmt__leakcheck_where(cache, g, where, sizeof(where));
			text_add(&t, "; %s holds 0x%llx\n", esc(&nb, where), (unsigned long long)g->ref_value);
		} else if (g->cls == GMT_LEAK_LEAKED && lw->scan.done) {
			text_add(&t, "; no host memory holds %s address%s%s%s\n", g->count == 1 ? "its" : "their",
				 lw->scan.unseen != NULL ? " as a pointer (" : "",
				 lw->scan.unseen != NULL ? lw->scan.unseen : "", lw->scan.unseen != NULL ? ")" : "");
		} else {
			text_add(&t, "\n");
		}
		ips = gmt__stack_get(g->stack, &depth);
		cache->epoch = gmt__stack_epoch(g->stack);
		while (ips != NULL && ntags < depth && gmt__word_is_tag(ips[depth - 1 - ntags]))
			ntags++;
		if (ips != NULL && depth - ntags > 0) {
			struct text_frames tf = { &t, 0 };
			struct gmt__frame_sink k = { text_native, text_python, &tf };

			gmt__frames_sink(&k, cache, ips, depth - ntags);
			if (tf.k > LEAK_REPORT_FRAMES)
				text_add(&t, "    ... %d more frames\n", tf.k - LEAK_REPORT_FRAMES);
		} else {
			text_add(&t, "    (no stack: GPUMEMTRACE_STACK_DEPTH=0)\n");
		}
	}
	if (shown > 0)
		text_add(&t, "\n");
	for (size_t i = 0; i < lw->ngroups; i++) {
		const struct gmt__leak_group *g = &lw->groups[i];
		const struct gmt__leak_stack *ls = gmt__leakcheck_stack_of(lw, g->stack);

		if (g->counted)
			continue;
		if (brief++ == LEAK_REPORT_BRIEF) {
			text_add(&t, "Not counted: ... and more (the exit snapshot lists them all)\n");
			break;
		}
		if (g->rule != NO_RULE)
			rule_words(in->supp, g->rule, where, sizeof(where));
		else
			snprintf(where, sizeof(where), "GPUMEMTRACE_LEAK_CLASSES leaves out '%s'", gmt__leak_class_names[g->cls]);
		text_add(&t, "Not counted: %s %s in %llu allocation%s at %s: %s\n",
			 gmt__leakcheck_suppresses(lw, g->rule) ? "suppressed" : gmt__leak_class_names[g->cls],
			 gmt__human_bytes(a, sizeof(a), g->bytes), (unsigned long long)g->count, plural(g->count),
			 ls != NULL ? esc(&nb, ls->where) : "an unknown place", where);
	}
	for (int i = 0; i < lw->nsuspects; i++) {
		const struct gmt__leak_suspect *x = &lw->suspects[i];
		const struct gmt__leak_stack *ls = gmt__leakcheck_stack_of(lw, x->id);

		text_add(&t, "Leak suspect: %s grew in %u rounds (fell in %u) to %s at its peak; %s live at exit\n",
			 ls != NULL ? esc(&nb, ls->where) : "an unknown place", x->rises, x->falls,
			 gmt__human_bytes(a, sizeof(a), x->peak), gmt__human_bytes(b, sizeof(b), x->live));
	}
	text_add(&t, "SUMMARY: %s in %llu allocation%s count as leaks",
		 gmt__human_bytes(a, sizeof(a), lw->total_bytes[TOTAL_COUNTED]),
		 (unsigned long long)lw->total_count[TOTAL_COUNTED], plural(lw->total_count[TOTAL_COUNTED]));
	text_add(&t, " (classes");
	for (int c = 0, n = 0; c < GMT_LEAK_CLASS_COUNT; c++) {
		if (in->classes & (1u << c))
			text_add(&t, "%s%s", n++ > 0 ? "," : " ", gmt__leak_class_names[c]);
	}
	text_add(&t, "%s); leaked %s in %llu, still referenced %s in %llu", (in->classes & ((1u << GMT_LEAK_CLASS_COUNT) - 1)) ? "" : " none",
		 gmt__human_bytes(a, sizeof(a), lw->total_bytes[GMT_LEAK_LEAKED]), (unsigned long long)lw->total_count[GMT_LEAK_LEAKED],
		 gmt__human_bytes(b, sizeof(b), lw->total_bytes[GMT_LEAK_REFERENCED]),
		 (unsigned long long)lw->total_count[GMT_LEAK_REFERENCED]);
	text_add(&t, "; cached %s in %llu; suppressed %s in %llu\n",
		 gmt__human_bytes(a, sizeof(a), lw->total_bytes[GMT_LEAK_CACHED]), (unsigned long long)lw->total_count[GMT_LEAK_CACHED],
		 gmt__human_bytes(b, sizeof(b), lw->total_bytes[TOTAL_SUPPRESSED]),
		 (unsigned long long)lw->total_count[TOTAL_SUPPRESSED]);
	if (t.failed) {
		free(t.s);
		return;
	}
	lw->in->report = t.s;
}

/* The oom report: a few lines for the program's stderr. */
static void oom_report(const struct gmt__snapshot *s, const struct gmt__model *m)
{
	const struct gmt__view *view = m->view;
	const struct gmt__top_sites *rep = &m->top;
	const struct gmt__device_state *st = view->diag_in.state;
	const struct gmt__episode *ep = s->episode;
	char a[32], b[32], c[32];
	struct name_buf nb;
	size_t at;
	int n;

	if (s->failed->by_framework)
		n = snprintf(s->report, s->report_len,
			     "out of memory: %s's allocator refused %s on device %d (no driver call failed)",
			     esc(&nb, s->failed->api), gmt__human_bytes(a, sizeof(a), s->failed->size), s->failed->device);
	else
		n = snprintf(s->report, s->report_len, "out of memory: %s of %s on device %d failed",
			     s->failed->api != NULL ? s->failed->api : "an allocation",
			     gmt__human_bytes(a, sizeof(a), s->failed->size), s->failed->device);
	at = n > 0 ? (size_t)n : 0;
	if (at < s->report_len && st != NULL && st->have_mem)
		at += (size_t)snprintf(s->report + at, s->report_len - at, " with %s free of %s",
				       gmt__human_bytes(b, sizeof(b), st->free_bytes),
				       gmt__human_bytes(c, sizeof(c), st->total_bytes));
	if (at < s->report_len && ep != NULL && ep->failures > 1) {
		at += (size_t)snprintf(s->report + at, s->report_len - at, "\nepisode: %llu failures over %s",
				       (unsigned long long)ep->failures, gmt__human_duration(b, sizeof(b), ep->last_ns - ep->first_ns));
		if (at < s->report_len && ep->freed_bytes > 0)
			at += (size_t)snprintf(s->report + at, s->report_len - at,
					       "; between them the program freed %s in %llu allocation%s%s%s and still failed",
					       gmt__human_bytes(a, sizeof(a), ep->freed_bytes),
					       (unsigned long long)ep->freed_count, ep->freed_count == 1 ? "" : "s",
					       m->freed.n > 0 ? " made at " : "", m->freed.n > 0 ? esc(&nb, m->freed.where[0]) : "");
	}
	if (at < s->report_len)
		at += (size_t)snprintf(s->report + at, s->report_len - at, "\nverdict: %s: %s",
				       gmt__verdict_name(view->diag.primary), esc(&nb, view->diag.v[0].detail));
	for (int i = 0; i < view->diag.nremedies && at < s->report_len; i++) {
		const struct gmt__remedy *r = &view->diag.remedies[i];
		const struct gmt__stack_site *ss = r->stack ? gmt__sites_of(&m->stack_sites, m->ids.v, r->stack) : NULL;

		at += (size_t)snprintf(s->report + at, s->report_len - at, "\ntry: %s", esc(&nb, r->text));
		if (at < s->report_len && ss != NULL && ss->site > 0)
			at += (size_t)snprintf(s->report + at, s->report_len - at, " (at %s)",
					       esc(&nb, m->stack_sites.labels[ss->site - 1]));
	}
	/* With the framework's tensors known, its tensors and the memory that
	 * is not the framework's; else the driver's allocations. */
	for (int i = 0; i < rep->n && at < s->report_len; i++) {
		uint64_t tensors = rep->tensors[i], others = rep->count[i] - tensors;

		/* One site a line: a line of three sites ran past any terminal. */
		at += (size_t)snprintf(s->report + at, s->report_len - at, "%s\n  %s in ",
				       i == 0 ? "\ntop sites:" : "",
				       gmt__human_bytes(a, sizeof(a), rep->bytes[i]));
		if (at < s->report_len && tensors > 0)
			at += (size_t)snprintf(s->report + at, s->report_len - at, "%llu tensor%s%s",
					       (unsigned long long)tensors, tensors == 1 ? "" : "s", others > 0 ? " and " : "");
		if (at < s->report_len && others > 0)
			at += (size_t)snprintf(s->report + at, s->report_len - at, "%llu allocation%s",
					       (unsigned long long)others, others == 1 ? "" : "s");
		if (at < s->report_len)
			at += (size_t)snprintf(s->report + at, s->report_len - at, " at %s", esc(&nb, rep->where[i]));
	}
}

void gmt__text_reports(const struct gmt__snapshot *s, struct gmt__model *m)
{
	if (s->leaks != NULL && s->leaks->want_report)
		leak_report(&m->lw, &m->cache);
	/* The report is the program's, the file the tracer's: it is made
	 * whether or not the file can be written. */
	if (s->report != NULL && s->report_len > 0 && m->view->have_diagnosis)
		oom_report(s, m);
}
