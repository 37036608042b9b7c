/* Out-of-memory episodes (analyze/capture.h, docs/snapshot-format.md
 * "episode"). A caching allocator that fails, frees its cache and asks
 * again, a library trying smaller workspaces, a retry loop: the program is
 * told of the last failure only. So the failures of one need of memory are
 * one episode, and its one snapshot is rewritten at each of them — it
 * describes the failure the program saw, with the live set and the device of
 * that moment — and lists the failures and what was freed between them.
 *
 * A failure continues the episode while it asks again what the one before
 * asked: on the same device, with no allocation of device memory (device,
 * async, array) succeeded there since, within GMT_EPISODE_GAP_NS of it (or of
 * the end of the snapshot written at it), no framework having reported that
 * one to the program, and from the same call of the program — the same chain
 * of the program's own frames (the site rule's, analyze/sites.h: a library's
 * release and retry inside one call of the program), or the same request
 * (size and kind) after memory was freed on the device since (the program's
 * own release and retry). Anything else starts a new episode: a failure
 * from another call site, with nothing released, comes after the program
 * was told of the one before and went on (issue 36: a failure the program
 * caught must keep its snapshot). The episode's report goes to stderr when
 * it ends: at the allocation that ended it (the background thread), once the
 * gap has passed, at the next failure, or at exit.
 *
 * A storm of episodes (a server refusing request after request) is bounded:
 * past a process's first GMT_STORM_EPISODES, an episode's snapshot is
 * captured (a copy of the live set and the history, no analysis, no file)
 * and its report left out; the latest capture is written once the storm
 * has been quiet for GMT_EPISODE_GAP_NS, or at exit, into one file that the
 * next such write replaces, with one line saying which episodes were left
 * out and that last one's report. Files, bytes, lines and time per process
 * stay bounded whatever the number of episodes.
 *
 * All of it under the core's lock, but the writes. */
#define _GNU_SOURCE
#include "tracer/tracer.h"

#include "analyze/frames.h"
#include "analyze/sites.h"
#include "util/log.h"
#include "util/parse.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Serialises the episode's writes and its end: two threads failing at once
 * must not rename their documents over each other out of order. Taken
 * before the core's lock, never after. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* What tells one call site of a failure from another (call_site), under
 * write_lock: the frames the loader named, and the site rule's patterns,
 * both kept from failure to failure while no module is unloaded (the
 * names they hold are the loader's). */
static struct {
	bool open;
	uint32_t epoch; /* modules.h's, when opened */
	struct gmt__frame_cache cache;
	struct gmt__site_rules rules;
} sites;

/* Frames the site cache keeps before it starts again (a program failing
 * from ever new stacks). */
#define SITES_CACHED_FRAMES 65536

/* The episodes left out of a storm, under the core's lock and write_lock. */
static struct {
	uint64_t count;            /* ended, in this process */
	struct gmt__capture *kept; /* the latest one's snapshot, not yet written */
	uint64_t kept_id;          /* its episode */
	uint64_t kept_mono;        /* when it was captured */
	uint64_t file_seq;         /* the file written kept ones go to (0: none yet) */
	struct gmt__oom_write out;
} storm;

/* Allocations whose success says the device had room again. */
static bool ends_episode(uint8_t kind)
{
	return kind == GMT_KIND_DEVICE || kind == GMT_KIND_ASYNC || kind == GMT_KIND_ARRAY;
}

void gmt__episode_allocated(const struct gmt__entry *e)
{
	struct gmt__oom_episode *ep = &gmt__core.episode;

	if (!ep->open || ep->ended != GMT_EPISODE_OPEN || e->device != ep->doc.device)
		return;
	if (ends_episode(e->kind))
		ep->ended = GMT_EPISODE_SUCCESS;
	else if (e->kind == GMT_KIND_VMM)
		ep->mapped_after = true;
}

void gmt__episode_freed(const struct gmt__entry *e)
{
	struct gmt__oom_episode *ep = &gmt__core.episode;
	struct gmt__episode *d = &ep->doc;
	int i;

	if (!ep->open || ep->ended != GMT_EPISODE_OPEN || e->device != d->device)
		return;
	d->freed_bytes += e->size;
	d->freed_count++;
	for (i = 0; i < d->nsites; i++) {
		if (d->sites[i].stack == e->stack && d->sites[i].kind == e->kind)
			break;
	}
	if (i == d->nsites) {
		if (d->nsites == GMT_EPISODE_SITES) {
			d->other_bytes += e->size;
			d->other_count++;
			return;
		}
		d->sites[d->nsites++] = (struct gmt__episode_site){ .stack = e->stack, .kind = e->kind };
	}
	d->sites[i].bytes += e->size;
	d->sites[i].count++;
}

/* The call site of a failure of stack `stack` (gmt__site_call), or 0 when
 * not known. write_lock held, not the core's lock: naming frames takes the
 * loader's lock. */
static uint64_t call_site(uint32_t stack)
{
	uint32_t epoch = gmt__modules_epoch();

	if (stack == 0)
		return 0;
	/* NOTE: a module unloaded since frees the names the cache and the
	 * patterns' memo point to. */
	if (sites.open && (sites.cache.n > SITES_CACHED_FRAMES || sites.epoch != epoch)) {
		gmt__frames_close(&sites.cache);
		gmt__site_rules_free(&sites.rules);
		sites.open = false;
	}
	if (!sites.open) {
		gmt__frames_open_loader(&sites.cache);
		(void)gmt__site_rules_init(&sites.rules, gmt__core.opt->site_libraries);
		sites.epoch = epoch;
		sites.open = true;
	}
	return gmt__site_call(&sites.cache, &sites.rules, stack);
}

/* Whether failure req, from call site `site`, asks again what the episode's
 * latest failure asked: from the same call of the program, or the same
 * request after memory was freed on the device since. A site not known (0)
 * is taken for the same: the rule before call sites were told apart. */
static bool asks_again(const struct gmt__oom_episode *ep, const struct gmt__snapshot_request *req, uint64_t site)
{
	if (site == 0 || ep->site == 0 || site == ep->site)
		return true;
	return req->size == ep->last.size && req->kind == ep->last.kind && ep->doc.freed_count != ep->mark_count;
}

/* Since when the episode has had no failure: its latest, or the end of the
 * snapshot written after it (a write of a large process can take seconds,
 * which are not the program's). */
static uint64_t quiet_since(const struct gmt__oom_episode *ep)
{
	return ep->written_mono > ep->last_mono ? ep->written_mono : ep->last_mono;
}

static void open_episode(struct gmt__oom_episode *ep, int device)
{
	uint64_t id = ep->doc.id + 1;

	free(ep->framework);
	memset(ep, 0, sizeof(*ep));
	ep->open = true;
	ep->ended = GMT_EPISODE_OPEN;
	ep->doc.id = id;
	ep->doc.device = device;
	ep->doc.end = GMT_EPISODE_OPEN;
	ep->left_out = id > GMT_STORM_EPISODES;
	if (ep->left_out)
		ep->doc.left_out = id - GMT_STORM_EPISODES - 1;
}

static void add_failure(struct gmt__oom_episode *ep, const struct gmt__snapshot_request *req, uint16_t api,
			const struct gmt__device_state *state, uint64_t site, uint64_t now)
{
	struct gmt__episode *d = &ep->doc;
	struct gmt__episode_failure f = {
		.failure = req->failure,
		.time_ns = gmt__now_ns(CLOCK_REALTIME),
		.size = req->size,
		.live_bytes = gmt__core.live_bytes,
		.freed_bytes = d->freed_bytes - ep->mark_bytes,
		.freed_count = d->freed_count - ep->mark_count,
		.stack = req->stack,
		.api = api,
		.kind = (uint8_t)req->kind,
		.tid = req->tid,
	};

	memcpy(f.thread, req->thread, sizeof(f.thread));
	if (d->failures++ == 0)
		d->first_ns = f.time_ns;
	d->last_ns = f.time_ns;
	/* The first failures, then the latest in the last place. */
	d->listed[d->nlisted < GMT_EPISODE_LISTED ? d->nlisted++ : GMT_EPISODE_LISTED - 1] = f;
	ep->mark_bytes = d->freed_bytes;
	ep->mark_count = d->freed_count;
	ep->mapped_after = false;
	ep->last = *req;
	ep->site = site;
	ep->awaiting = true;
	ep->last_mono = now;
	ep->have_state = state != NULL;
	if (state != NULL)
		ep->last_state = *state;
}

/* The episode's snapshot now, taken at failure `described` (0: at its end):
 * written, or captured for later in a storm of episodes. Lock and write_lock
 * held; the lock is released while the file is written (or the capture
 * copied) and taken again. */
static void write_episode(struct gmt__oom_episode *ep, uint64_t described)
{
	struct gmt__episode copy = ep->doc;
	struct gmt__snapshot_request req = ep->last;
	struct gmt__device_state state = ep->last_state;

	copy.described = described;
	if (ep->left_out) {
		struct gmt__capture *c = gmt__snapshot_keep_oom(&req, ep->have_state ? &state : NULL, &copy,
							     ep->framework); /* releases the lock */

		gmt__core_lock();
		if (c != NULL) {
			gmt__snapshot_drop(storm.kept);
			storm.kept = c;
			storm.kept_id = copy.id;
			storm.kept_mono = gmt__now_ns(CLOCK_MONOTONIC);
		}
	} else {
		gmt__snapshot_take_oom(&req, ep->have_state ? &state : NULL, &copy, ep->framework, ep->file_seq,
				       &ep->out); /* releases the lock */
		gmt__core_lock();
		/* The episode's file, once there is one: later writes replace it. */
		if (ep->out.result == 0 && ep->out.seq != 0)
			ep->file_seq = ep->out.seq;
		gmt__metrics_due();
	}
	ep->written_mono = gmt__now_ns(CLOCK_MONOTONIC);
	ep->doc.described = described == 0 ? ep->doc.failures : described;
}

/* Writes the latest episode left out of a storm, once the storm has been
 * quiet for GMT_EPISODE_GAP_NS or at exit, and says in one line which were
 * left out, then that one's report. Lock and write_lock held, no episode
 * open; the lock is released while the file is written. */
static void write_kept(bool exiting)
{
	struct gmt__capture *c = storm.kept;
	uint64_t id = storm.kept_id, count = storm.count;

	if (c == NULL || (!exiting && gmt__now_ns(CLOCK_MONOTONIC) - storm.kept_mono <= GMT_EPISODE_GAP_NS))
		return;
	storm.kept = NULL;
	gmt__core_unlock();
	gmt__snapshot_publish_oom(c, storm.file_seq, &storm.out);
	gmt__core_lock();
	if (storm.out.result == 0 && storm.out.seq != 0)
		storm.file_seq = storm.out.seq;
	gmt__report("out of memory: episodes %d to %llu of this process (%llu) were not reported one by one "
		    "(a storm: only the first %d are); the latest, episode %llu:",
		    GMT_STORM_EPISODES + 1, (unsigned long long)(GMT_STORM_EPISODES + count),
		    (unsigned long long)count, GMT_STORM_EPISODES, (unsigned long long)id);
	if (storm.out.report[0] != '\0')
		gmt__oom_report(storm.out.report, storm.out.path, storm.out.result);
	gmt__metrics_due();
}

/* Whether the episode is one the watching framework recovered from: it
 * reported none of its failures to the tracer (its observer runs before the
 * program is told), and a device allocation succeeded after them — or,
 * where the allocations are pages of an expandable segment, whose successes
 * do not end an episode (the failing request maps them too), a page came
 * after its last failure and the episode ended without the framework's
 * word. */
static bool recovered(const struct gmt__oom_episode *ep, enum gmt__episode_end end)
{
	return (end == GMT_EPISODE_SUCCESS || ep->mapped_after) && ep->framework == NULL &&
	       gmt__core.watching[0] != '\0';
}

/* Ends the episode: a snapshot at its end when failures came after the last
 * written one, then its report — one line for an episode the framework
 * recovered from, which the program never saw. Lock and write_lock held. */
static void end_episode(struct gmt__oom_episode *ep, enum gmt__episode_end end)
{
	char size[32];

	ep->doc.end = end;
	if (ep->left_out) {
		/* A storm's: its snapshot kept, and no report of its own. */
		if (!recovered(ep, end) && ep->doc.described < ep->doc.failures)
			write_episode(ep, 0);
		if (recovered(ep, end))
			STAT_ADD(oom_recovered, 1);
		storm.count++;
		STAT_ADD(oom_episodes_left_out, 1);
		ep->open = false;
		return;
	}
	if (recovered(ep, end)) {
		/* Never written (its failures waited for the framework's word):
		 * the program was not told, so no snapshot. */
		STAT_ADD(oom_recovered, 1);
		gmt__report("out of memory, recovered: %s of %s on device %d failed %llu time%s; %s reported "
			    "no out-of-memory and a later allocation succeeded (its allocator freed and retried): "
			    "no snapshot",
			    ep->last.api, gmt__human_bytes(size, sizeof(size), ep->last.size), ep->last.device,
			    (unsigned long long)ep->doc.failures, ep->doc.failures == 1 ? "" : "s", gmt__core.watching);
		ep->open = false;
		return;
	}
	if (ep->doc.described < ep->doc.failures)
		write_episode(ep, 0);
	if (ep->out.report[0] != '\0')
		gmt__oom_report(ep->out.report, ep->out.path, ep->out.result);
	ep->open = false;
}

void gmt__episode_watch(const char *name)
{
	char *w = gmt__core.watching;
	size_t n, len = strlen(name);
	const char *at;

	gmt__core_lock();
	/* Each framework once, in the order they came: "torch/cupy". */
	for (at = w; (at = strstr(at, name)) != NULL; at += len) {
		if ((at == w || at[-1] == '/') && (at[len] == '\0' || at[len] == '/'))
			break;
	}
	n = strlen(w);
	if (at == NULL && n + (n > 0) + len < sizeof(gmt__core.watching))
		snprintf(w + n, sizeof(gmt__core.watching) - n, "%s%s", n > 0 ? "/" : "", name);
	gmt__core_unlock();
}

/* A failure the program saw or may see (req, in call or framework `api`,
 * from call site `site`): its number, the history, and its episode —
 * continued, or a new one — whose snapshot is written now or deferred.
 * `framework`: the state of the framework that reported it itself (taken
 * over), or NULL for a driver failure. Lock held, and write_lock when oom
 * snapshots are on. */
static void fail(struct gmt__snapshot_request *req, const struct gmt__device_state *state, uint16_t api,
		 uint32_t tid, char *framework, uint64_t site)
{
	struct gmt__oom_episode *ep = &gmt__core.episode;
	uint64_t now;

	/* The thread that failed (this one), for the snapshot and the
	 * episode's list: concurrent failures of several threads are one
	 * episode, and each of them names its own. */
	req->tid = tid;
	if (prctl(PR_GET_NAME, req->thread) != 0)
		req->thread[0] = '\0';
	req->thread[sizeof(req->thread) - 1] = '\0';
	/* Everything this thread or any other completed before the failing call
	 * has its number already: apply up to the current one. */
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	req->failure = ++gmt__core.oom_failures;
	if (gmt__core.have_hist) {
		struct gmt__hist_cause cause = {
			.seq = req->failure, .time_ns = gmt__now_ns(CLOCK_REALTIME), .tid = tid, .api = api,
		};

		gmt__history_oom(&gmt__core.hist, &cause, req->size, (uint8_t)req->kind, req->device, req->stack);
	}
	if (!(gmt__core.opt->snapshot_on & GMT_TRIGGER_OOM)) {
		free(framework);
		return;
	}
	now = gmt__now_ns(CLOCK_MONOTONIC);
	if (ep->open) {
		if (ep->ended != GMT_EPISODE_OPEN)
			end_episode(ep, ep->ended);
		else if (req->device != ep->doc.device)
			end_episode(ep, GMT_EPISODE_OTHER_DEVICE);
		else if (ep->reported)
			end_episode(ep, GMT_EPISODE_REPORTED);
		else if (!asks_again(ep, req, site))
			end_episode(ep, GMT_EPISODE_OTHER_SITE);
		else if (now - quiet_since(ep) > GMT_EPISODE_GAP_NS)
			end_episode(ep, GMT_EPISODE_GAP);
	}
	if (!ep->open)
		open_episode(ep, req->device);
	add_failure(ep, req, api, state, site, now);
	if (framework != NULL) {
		/* The framework's own refusal, reported as the program is told. */
		free(ep->framework);
		ep->framework = framework;
		ep->awaiting = false;
		ep->reported = true;
	}
	if (framework == NULL && gmt__core.watching[0] != '\0') {
		/* A watching framework reports its out-of-memory errors right
		 * after its last failure (gmt_framework), with nothing allocated
		 * between: the snapshot is written then — or at the episode's end
		 * when it reported none and no allocation succeeded — so a
		 * failure it recovers from holds up no call with a write. */
		ep->doc.not_written++;
	} else if (ep->doc.failures > GMT_EPISODE_WRITES && now - ep->written_mono < GMT_EPISODE_REWRITE_NS) {
		/* A storm: past the first few, at most one write a second; a
		 * write at the end takes in the rest. */
		ep->doc.not_written++;
		STAT_ADD(oom_suppressed, 1);
	} else {
		write_episode(ep, ep->doc.failures);
	}
}

void gmt__snapshot_oom(struct gmt__snapshot_request *req, const struct gmt__device_state *state, uint16_t api,
		       uint32_t tid)
{
	bool on = gmt__core.opt->snapshot_on & GMT_TRIGGER_OOM;
	uint64_t site = 0;

	if (on) {
		pthread_mutex_lock(&write_lock);
		site = call_site(req->stack);
	}
	gmt__core_lock();
	fail(req, state, api, tid, NULL, site);
	gmt__core_unlock();
	if (on)
		pthread_mutex_unlock(&write_lock);
}

void gmt__episode_settle(bool exiting)
{
	struct gmt__oom_episode *ep = &gmt__core.episode;
	bool ends;

	GMT_CHECK(gmt__core_held());
	ends = ep->open && (ep->ended != GMT_EPISODE_OPEN || exiting ||
			    gmt__now_ns(CLOCK_MONOTONIC) - quiet_since(ep) > GMT_EPISODE_GAP_NS);
	if (!ends && (ep->open || storm.kept == NULL))
		return;
	if (pthread_mutex_trylock(&write_lock) != 0) {
		/* A failing thread is writing: it ends the episode itself when
		 * it is over. At exit, wait for it (the order: write_lock first). */
		if (!exiting)
			return;
		gmt__core_unlock();
		pthread_mutex_lock(&write_lock);
		gmt__core_lock();
	}
	if (ep->open && (ends || exiting))
		end_episode(ep, ep->ended != GMT_EPISODE_OPEN ? ep->ended : exiting ? GMT_EPISODE_EXIT : GMT_EPISODE_GAP);
	if (!ep->open)
		write_kept(exiting);
	pthread_mutex_unlock(&write_lock);
}

void gmt__episode_framework_exit(char *json)
{
	gmt__core_lock();
	free(gmt__core.framework_exit);
	gmt__core.framework_exit = json;
	gmt__core_unlock();
}

void gmt__episode_framework_api(char *json)
{
	gmt__core_lock();
	free(gmt__core.framework_api);
	gmt__core.framework_api = json;
	gmt__core_unlock();
}

bool gmt__episode_awaits(void)
{
	bool awaits;

	gmt__core_lock();
	awaits = gmt__core.episode.open && gmt__core.episode.awaiting;
	gmt__core_unlock();
	return awaits;
}

void gmt__episode_reported(char *json, struct gmt__snapshot_request *req, const struct gmt__device_state *state,
			   uint16_t label, uint32_t tid)
{
	struct gmt__oom_episode *ep = &gmt__core.episode;
	uint64_t site;

	pthread_mutex_lock(&write_lock);
	/* Its stack: none when a driver failure awaits the report. */
	site = call_site(req->stack);
	gmt__core_lock();
	if (ep->open && ep->awaiting) {
		/* The episode's latest failure (the framework's observer runs
		 * right after the failure it was told of, before any allocation
		 * could end the episode): its file written or rewritten with it,
		 * of that failure. */
		ep->awaiting = false;
		ep->reported = true;
		free(ep->framework);
		ep->framework = json;
		/* Its latest failure, counted unwritten (deferred, or a storm's),
		 * gets its snapshot now. */
		if (ep->doc.described < ep->doc.failures)
			ep->doc.not_written--;
		write_episode(ep, ep->doc.failures);
	} else {
		/* No driver failure since its last report: its allocator
		 * refused on its own. */
		fail(req, state, label, tid, json, site);
	}
	gmt__core_unlock();
	pthread_mutex_unlock(&write_lock);
}

void gmt__episode_fork_prepare(void)
{
	pthread_mutex_lock(&write_lock);
}

void gmt__episode_fork_parent(void)
{
	pthread_mutex_unlock(&write_lock);
}

void gmt__episode_fork_child(void)
{
	/* The parent's storm is the parent's to write. */
	gmt__snapshot_drop(storm.kept);
	memset(&storm, 0, sizeof(storm));
	free(gmt__core.episode.framework);
	free(gmt__core.framework_exit);
	gmt__core.framework_exit = NULL;
	free(gmt__core.framework_api);
	gmt__core.framework_api = NULL;
	memset(&gmt__core.episode, 0, sizeof(gmt__core.episode));
	pthread_mutex_unlock(&write_lock);
}
