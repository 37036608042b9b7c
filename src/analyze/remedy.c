/* The remedies (remedy.h). Each rule reads numbers the diagnosis wrote and
 * offers its remedy only when they support it:
 *
 * - split_request: never_fits. The request (or the framework's) against all
 *   the process could have of the device (capacity): at most capacity /
 *   request of this batch, or ⌈request / capacity⌉ micro-batches, or the
 *   model sharded.
 * - expandable_segments: allocator_fragmentation of PyTorch's allocator whose
 *   segments on the device are not expandable already: free inside its
 *   segments ≥ its request > its largest free block. Where its history
 *   replays the run faithfully (replay.h), offered only when the replay
 *   under the run's settings with expandable segments serves the failing
 *   request, with the peak reserved it reached of what PyTorch could hold.
 * - smaller_batch, checkpointing: exhaustion is primary (the process's own
 *   memory fills the device), the program marks its steps (gmt_step) and the
 *   memory allocated since the current step began and still live — the
 *   step's activations, temporaries and gradients — is more than the
 *   shortfall: a batch of 1/k keeps about 1/k of it, enough for k ≥
 *   ⌈step / (step − shortfall)⌉; checkpointing recomputes what the forward
 *   keeps for the backward instead.
 * - mixed_precision: the same as smaller_batch, PyTorch's, and half of the
 *   step's memory covers the shortfall — said as "if the step runs in
 *   float32": element types are not in a snapshot.
 * - free_growing_site: growth applies; the site that gained most, its gain
 *   and, with steps, its gain per whole step, in the words of its language
 *   (a PyTorch tensor's line, a Python line, C).
 * - shrink_largest_site: exhaustion is primary and the stack holding the most
 *   live memory on the device alone covers the shortfall; when that memory
 *   was all allocated before the program's first step (largest_before_steps)
 *   it is the program's set-up, said in its language — a model's weights and
 *   optimizer state (lower precision, lighter optimizer state, sharding), a
 *   Python line's data, a C program's buffers.
 * - raise_framework_limit: framework_limit is primary and what the framework
 *   holds of the device (allocated + free inside its pool) and what the
 *   driver has free cover its allocated bytes and the request: the limit
 *   raised to cover them (JAX: the smallest XLA_PYTHON_CLIENT_MEM_FRACTION in
 *   hundredths that does; CuPy: the pool's set_limit).
 * - trim_pools, large_blocks_first, other_device: pool_reservation,
 *   fragmentation (stranded pages) and other_processes apply — each verdict's
 *   bytes cover the shortfall.
 *
 * torch.no_grad() and zero_grad(set_to_none=True) are never offered alone:
 * the numbers they would rest on (whether gradients are needed, which live
 * memory is gradients) are not in a snapshot. */
#define _GNU_SOURCE
#include "analyze/remedy.h"
#include "analyze/replay.h"
#include "analyze/tensors.h"
#include "util/parse.h"
#include "util/xlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const names[GMT_REMEDY_COUNT] = { GMT_REMEDIES(GMT_X_WORD) };

const char *gmt__remedy_name(enum gmt__remedy_id id)
{
	return GMT_X_NAME(names, GMT_REMEDY_COUNT, id, "unknown");
}

static bool listed(const struct gmt__diagnosis *d, enum gmt__verdict v)
{
	for (int i = 0; i < d->nverdicts; i++) {
		if (d->v[i].verdict == v)
			return true;
	}
	return false;
}

/* part as a whole percentage of whole (at least 1 when part > 0). */
static unsigned percent(uint64_t part, uint64_t whole)
{
	unsigned p;

	if (whole == 0)
		return 0;
	p = (unsigned)((long double)part * 100 / whole);
	return p == 0 && part > 0 ? 1 : p;
}

static struct gmt__remedy *offer(struct gmt__diagnosis *d, enum gmt__remedy_id id, enum gmt__verdict verdict,
				 uint64_t bytes, uint32_t stack, const char *const rests_on[])
{
	struct gmt__remedy *r = &d->remedies[d->nremedies++];

	memset(r, 0, sizeof(*r));
	r->id = id;
	r->verdict = verdict;
	r->bytes = bytes;
	r->stack = stack;
	for (int k = 0; k < 5 && rests_on[k] != NULL; k++)
		r->rests_on[k] = rests_on[k];
	return r;
}

__attribute__((format(printf, 2, 3))) static void say(struct gmt__remedy *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->text, sizeof(r->text), fmt, ap);
	va_end(ap);
}

static void split_request(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "requested_bytes", "framework_requested_bytes", "capacity_bytes", NULL };
	uint64_t asked = in->fw_requested > d->needed ? in->fw_requested : d->needed;
	uint64_t pieces = d->capacity > 0 ? (asked + d->capacity - 1) / d->capacity : 0;
	char a[32], b[32];
	struct gmt__remedy *r;

	if (d->primary != GMT_VERDICT_NEVER_FITS || d->capacity == 0)
		return;
	r = offer(d, GMT_REMEDY_SPLIT_REQUEST, GMT_VERDICT_NEVER_FITS, asked, 0, rests);
	say(r,
	    "split the work: the request (%s) is larger than the %s this process could ever have of the device, so "
	    "a batch of at most %u%% of this one, gradient accumulation over %llu or more micro-batches, or the model "
	    "sharded across devices",
	    gmt__human_bytes(a, sizeof(a), asked), gmt__human_bytes(b, sizeof(b), d->capacity),
	    percent(d->capacity, asked), (unsigned long long)(pieces < 2 ? 2 : pieces));
}

static void expandable(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "reserved_unallocated_bytes", "largest_free_block_bytes",
					     "framework_requested_bytes", "framework_expandable", NULL };
	static const char *const rests_replayed[] = { "reserved_unallocated_bytes", "largest_free_block_bytes",
						      "framework_requested_bytes", "replay_peak_reserved_bytes",
						      "replay_device_bytes", NULL };
	const struct gmt__rp_expandable *rp = in->replay;
	bool replayed = rp != NULL && rp->replayed;
	char a[32], b[32], c[32];
	struct gmt__remedy *r;
	size_t at;

	if (d->primary != GMT_VERDICT_ALLOCATOR_FRAGMENTATION || !in->fw_torch || in->fw_expandable == 1)
		return;
	/* The replay of the run says it would not have helped. */
	if (replayed && !rp->fits)
		return;
	r = offer(d, GMT_REMEDY_EXPANDABLE, GMT_VERDICT_ALLOCATOR_FRAGMENTATION, in->fw_reserved_unallocated, 0,
		  replayed ? rests_replayed : rests);
	say(r,
	    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: PyTorch holds %s free inside its segments, more than the "
	    "%s it needed, but its largest free block is %s; expandable segments grow in place instead of leaving "
	    "free pieces between blocks",
	    gmt__human_bytes(a, sizeof(a), in->fw_reserved_unallocated), gmt__human_bytes(b, sizeof(b), in->fw_requested),
	    gmt__human_bytes(c, sizeof(c), in->fw_largest_free));
	if (!replayed)
		return;
	at = strlen(r->text);
	snprintf(r->text + at, sizeof(r->text) - at, " (replayed: fits, peak reserved %s of %s)",
		 gmt__human_bytes(a, sizeof(a), rp->peak_reserved), gmt__human_bytes(b, sizeof(b), rp->device_bytes));
}

static void step_memory(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "step", "step_live_bytes", "tracked_total_bytes", "shortfall_bytes", NULL };
	uint64_t x = in->step_live_bytes, f = d->shortfall, k;
	enum gmt__verdict v = GMT_VERDICT_EXHAUSTION;
	char a[32], b[32], c[32];
	struct gmt__remedy *r;

	if (!d->have_mem || !in->step_known || f == 0 || x <= f || d->primary != GMT_VERDICT_EXHAUSTION)
		return;
	/* 1/k of x leaves room when x - x/k >= f, i.e. k >= x / (x - f). */
	k = (x + (x - f) - 1) / (x - f);
	if (k < 2)
		k = 2;
	r = offer(d, GMT_REMEDY_SMALLER_BATCH, v, x, 0, rests);
	say(r,
	    "a smaller batch, or the same batch as micro-batches with gradient accumulation: the memory allocated "
	    "since the program marked step %llu and still live is %s (%u%% of this process's on the device); a batch of 1/%llu "
	    "keeps about %s and leaves room for the %s the request fell short",
	    (unsigned long long)in->step, gmt__human_bytes(a, sizeof(a), x), percent(x, d->tracked_total),
	    (unsigned long long)k, gmt__human_bytes(b, sizeof(b), x / k), gmt__human_bytes(c, sizeof(c), f));
	r = offer(d, GMT_REMEDY_CHECKPOINTING, v, x, 0, rests);
	say(r,
	    "activation checkpointing (torch.utils.checkpoint, jax.checkpoint): recompute in the backward what the "
	    "forward keeps for it; the %s allocated since step %llu and still live is the memory it trades for compute, more than "
	    "the %s the request fell short",
	    gmt__human_bytes(a, sizeof(a), x), (unsigned long long)in->step, gmt__human_bytes(b, sizeof(b), f));
	/* Half of the step's memory in 16 bits: element types are not in a
	 * snapshot, so the sentence is conditional, and offered only where
	 * half alone covers the shortfall. */
	if (!in->fw_torch || x / 2 < f)
		return;
	r = offer(d, GMT_REMEDY_MIXED_PRECISION, v, x / 2, 0, rests);
	say(r,
	    "mixed precision, if the step runs in float32: under `torch.autocast(\"cuda\", dtype=torch.bfloat16)` "
	    "the activations the forward keeps for the backward are stored in 16 bits; half of the %s allocated since "
	    "step %llu and still live is %s, more than the %s the request fell short",
	    gmt__human_bytes(a, sizeof(a), x), (unsigned long long)in->step, gmt__human_bytes(b, sizeof(b), x / 2),
	    gmt__human_bytes(c, sizeof(c), f));
}

/* What the growing site kept, in the words of its language: a PyTorch
 * tensor's line (a tensor kept keeps its graph; evaluation without
 * torch.no_grad() keeps every output's), a Python line (the references
 * that keep its arrays), the C code (the buffers it keeps). */
static void free_growth(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "growth_top_stack", "growth_top_bytes", "growth_top_step_bytes",
					     "growth_top_steps", NULL };
	uint64_t g = in->growth_top_bytes, n = in->growth_top_steps;
	char a[32], b[32], how[96];
	struct gmt__remedy *r;

	if (!listed(d, GMT_VERDICT_GROWTH) || (in->growth_top_stack == 0 && !in->growth_top_unlined) || g == 0)
		return;
	r = offer(d, GMT_REMEDY_FREE_GROWTH, GMT_VERDICT_GROWTH, g, in->growth_top_stack, rests);
	if (n > 0)
		snprintf(how, sizeof(how), "%s a step over %llu whole steps",
			 gmt__human_bytes(b, sizeof(b), in->growth_top_step_bytes / n), (unsigned long long)n);
	else
		snprintf(how, sizeof(how), "it grew by %s while the program ran", gmt__human_bytes(a, sizeof(a), g));
	if (in->growth_top_unlined && in->tensors_lined)
		say(r,
		    "find what keeps these tensors: PyTorch recorded no Python line for them (made in autograd's "
		    "backward or in C++ code) (%s) — a tensor kept across steps keeps its graph too: keep "
		    "`loss.item()` or `loss.detach()`, `del` what a list holds",
		    how);
	else if (in->growth_top_unlined)
		say(r,
		    "find the line that keeps them: this run recorded PyTorch's tensors without their lines; run again "
		    "with GPUMEMTRACE_TORCH_HISTORY=alloc (the default) to name it (%s) — a tensor kept across steps "
		    "keeps its graph too: keep `loss.item()` or `loss.detach()`, `del` what a list holds",
		    how);
	else if (in->fw_torch && in->growth_top_tensor && n > 0)
		say(r,
		    "stop keeping what this line allocates across steps (%s): a tensor kept across steps keeps its "
		    "graph too, so keep `loss.item()` or `loss.detach()` instead of the tensor, and `del` what a list "
		    "or an attribute holds; in evaluation, run under `torch.no_grad()`",
		    how);
	else if (in->fw_torch && in->growth_top_tensor)
		say(r,
		    "stop keeping what this line allocates (%s): if it runs the model for evaluation, wrap it in "
		    "`with torch.no_grad():` (without it every output keeps the activations of a backward that never "
		    "comes); otherwise keep `.item()` or `.detach()` of what is kept, and `del` the rest",
		    how);
	else if (in->growth_top_python)
		say(r,
		    "drop the references that keep what this line allocates alive — a list, a dict, an attribute, a "
		    "cache (%s)",
		    how);
	else
		say(r,
		    "free what this site allocates once it is done with it — each buffer it keeps across iterations "
		    "(%s)",
		    how);
}

static void largest_site(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "largest_stack", "largest_stack_bytes", "tracked_total_bytes",
					     "shortfall_bytes", "largest_stack_before_steps", NULL };
	uint64_t x = in->largest_stack_bytes;
	char a[32], b[32];
	struct gmt__remedy *r;

	if (!d->have_mem || d->primary != GMT_VERDICT_EXHAUSTION || d->shortfall == 0 || x < d->shortfall ||
	    in->largest_stack == 0)
		return;
	r = offer(d, GMT_REMEDY_LARGEST_SITE, GMT_VERDICT_EXHAUSTION, x, in->largest_stack, rests);
	gmt__human_bytes(a, sizeof(a), x);
	gmt__human_bytes(b, sizeof(b), d->shortfall);
	if (in->largest_before_steps != 1)
		say(r,
		    "keep less of what this site allocates, or free it before this request: it holds %s live (%u%% of "
		    "this process's on the device), more than the %s the request fell short",
		    a, percent(x, d->tracked_total), b);
	else if (in->fw_torch && gmt__is_tensor_stack(in->largest_stack))
		say(r,
		    "this line's tensors were all made before the first step and stay live — the model's weights, "
		    "buffers or optimizer state: %s (%u%% of this process's on the device), more than the %s the request "
		    "fell short; hold them in less: bfloat16 weights if they are float32, an optimizer with less state "
		    "(Adam keeps two values a weight), or shard them across devices (FSDP, DeepSpeed ZeRO)",
		    a, percent(x, d->tracked_total), b);
	else if (in->largest_python)
		say(r,
		    "what this line allocated was all made before the program's first step and stays live — its set-up "
		    "(a model's weights, data kept on the device): %s (%u%% of this process's on the device), more than "
		    "the %s the request fell short; keep it in a smaller type, shard it across devices, or keep part of "
		    "it in host memory",
		    a, percent(x, d->tracked_total), b);
	else
		say(r,
		    "this site's buffers were all allocated before the program's first step and stay live — its set-up, "
		    "not a step's: %s (%u%% of this process's on the device), more than the %s the request fell short; "
		    "make them smaller (a narrower element type, fewer copies), spread them over devices, or keep part "
		    "of them in host memory",
		    a, percent(x, d->tracked_total), b);
}

static void verdict_bytes(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const pool[] = { "pool_unused_bytes", "shortfall_bytes", NULL };
	static const char *const pages[] = { "stranded_bytes", "pages_partial", "granularity", "shortfall_bytes", NULL };
	static const char *const others[] = { "other_processes_bytes", "shortfall_bytes", NULL };
	const struct gmt__device_state *st = in->state;
	char a[32], b[32], c[32];
	struct gmt__remedy *r;

	if (!d->have_mem || d->shortfall == 0)
		return;
	if (listed(d, GMT_VERDICT_POOL)) {
		r = offer(d, GMT_REMEDY_TRIM_POOLS, GMT_VERDICT_POOL, d->pool_unused, 0, pool);
		say(r,
		    "cudaMemPoolTrimTo(pool, 0) before the allocation, or a lower cudaMemPoolAttrReleaseThreshold: the "
		    "stream-ordered pools hold %s reserved and unused, more than the %s the request fell short",
		    gmt__human_bytes(a, sizeof(a), d->pool_unused), gmt__human_bytes(b, sizeof(b), d->shortfall));
	}
	if (listed(d, GMT_VERDICT_FRAGMENTATION)) {
		r = offer(d, GMT_REMEDY_LARGE_FIRST, GMT_VERDICT_FRAGMENTATION, in->pages.stranded_bytes, 0, pages);
		say(r,
		    "allocate the large blocks first, or give the small ones a pool (cudaMallocAsync, a caching "
		    "allocator): %s lie unused in %llu partly used pages of %s, more than the %s the request fell short",
		    gmt__human_bytes(a, sizeof(a), in->pages.stranded_bytes), (unsigned long long)in->pages.partial,
		    gmt__human_bytes(b, sizeof(b), in->pages.granularity), gmt__human_bytes(c, sizeof(c), d->shortfall));
	}
	if (listed(d, GMT_VERDICT_OTHERS) && st != NULL && st->have_others) {
		r = offer(d, GMT_REMEDY_OTHER_DEVICE, GMT_VERDICT_OTHERS, st->others_bytes, 0, others);
		say(r,
		    "run on a device the other processes do not use (CUDA_VISIBLE_DEVICES), or stop them: %d other "
		    "process%s hold%s %s of this device, more than the %s the request fell short",
		    st->nothers, st->nothers == 1 ? "" : "es", st->nothers == 1 ? "s" : "",
		    gmt__human_bytes(a, sizeof(a), st->others_bytes), gmt__human_bytes(b, sizeof(b), d->shortfall));
	}
}

static void raise_limit(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	static const char *const rests[] = { "framework_allocated_bytes", "framework_requested_bytes",
					     "framework_limit_bytes", "reserved_unallocated_bytes", "free_bytes", NULL };
	const struct gmt__device_state *st = in->state;
	uint64_t want = gmt__fw_held_by_limit(in) + in->fw_requested, more = want - in->fw_limit;
	/* What it holds of the device already, and all it could hold. */
	uint64_t held = in->fw_known ? in->fw_allocated + in->fw_reserved_unallocated : 0;
	char a[32], b[32], c[32], e[32], f[32];
	struct gmt__remedy *r;

	if (d->primary != GMT_VERDICT_FRAMEWORK_LIMIT || !d->have_mem || st->total_bytes == 0 ||
	    held + st->free_bytes < want)
		return;
	if (in->fw_name != NULL && (strcmp(in->fw_name, "jax") == 0 || in->fw_torch)) {
		/* XLA's limit and PyTorch's memory fraction are fractions of the
		 * device's total. */
		unsigned hundredths = (unsigned)((want * 100 + st->total_bytes - 1) / st->total_bytes);

		if (hundredths > 100 || (long double)hundredths * st->total_bytes / 100 > held + st->free_bytes)
			return;
		r = offer(d, GMT_REMEDY_RAISE_LIMIT, GMT_VERDICT_FRAMEWORK_LIMIT, more, 0, rests);
		say(r,
		    in->fw_torch ? "torch.cuda.set_per_process_memory_fraction(%u.%02u): PyTorch's allocator may reserve "
				   "%s (%u%% of the device's %s) and needed %s with this request; the device has %s free "
				   "besides the %s it holds"
				 : "XLA_PYTHON_CLIENT_MEM_FRACTION=%u.%02u: JAX's allocator may use %s (%u%% of the device's "
				   "%s) and needed %s with this request; the device has %s free besides the %s it holds",
		    hundredths / 100, hundredths % 100, gmt__human_bytes(a, sizeof(a), in->fw_limit),
		    percent(in->fw_limit, st->total_bytes), gmt__human_bytes(b, sizeof(b), st->total_bytes),
		    gmt__human_bytes(c, sizeof(c), want), gmt__human_bytes(e, sizeof(e), st->free_bytes),
		    gmt__human_bytes(f, sizeof(f), held));
		return;
	}
	r = offer(d, GMT_REMEDY_RAISE_LIMIT, GMT_VERDICT_FRAMEWORK_LIMIT, more, 0, rests);
	if (in->fw_name != NULL && strcmp(in->fw_name, "cupy") == 0)
		say(r,
		    "raise the pool's limit to at least %s (cupy.get_default_memory_pool().set_limit(size=%llu), or "
		    "CUPY_GPU_MEMORY_LIMIT): it is %s; the pool holds %s and the device has %s free",
		    gmt__human_bytes(a, sizeof(a), want), (unsigned long long)want,
		    gmt__human_bytes(b, sizeof(b), in->fw_limit), gmt__human_bytes(c, sizeof(c), held),
		    gmt__human_bytes(e, sizeof(e), st->free_bytes));
	else
		say(r, "raise %s's own limit to at least %s: it is %s; it holds %s and the device has %s free",
		    in->fw_name != NULL ? in->fw_name : "the framework", gmt__human_bytes(a, sizeof(a), want),
		    gmt__human_bytes(b, sizeof(b), in->fw_limit), gmt__human_bytes(c, sizeof(c), held),
		    gmt__human_bytes(e, sizeof(e), st->free_bytes));
}

void gmt__remedies(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	d->nremedies = 0;
	split_request(in, d);
	expandable(in, d);
	step_memory(in, d);
	free_growth(in, d);
	largest_site(in, d);
	verdict_bytes(in, d);
	raise_limit(in, d);
}
