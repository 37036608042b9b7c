/* Python frames (pystack.h): the interpreter's C API found at run time, the
 * frame walk under the GIL the allocating thread holds, and two tables — code
 * objects (kept alive, their names copied) and (code, instruction) → line. */
#define _GNU_SOURCE
#include "record/pystack.h"

#include "record/pyread.h"
#include "util/loader.h"
#include "util/log.h"
#include "util/map.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

/* Memory ordering at a glance:
 *   R1 probe's release of `ready`        -> A1 capture's acquire: the API table
 *   R2 code_new's release of `ncodes`    -> A2 gmt__py_frame's acquire: the
 *                                           entry and its leaf
 * Everything else is read and written under `lock`. */

/* Python objects stay opaque: only pointers to them pass through here. */
typedef struct py_object py_object;

/* The C API, every function of the stable public API of 3.9 and later unless
 * marked optional. */
struct py_api {
	int (*is_initialized)(void);
	py_object *(*tstate_unchecked)(void); /* the thread state attached to this thread, or NULL */
	py_object *(*gilstate_this)(void);    /* this thread's own thread state, or NULL */
	py_object *(*tstate_frame)(py_object *tstate);
	py_object *(*frame_code)(py_object *frame);
	py_object *(*frame_back)(py_object *frame);
	int (*frame_line)(py_object *frame);
	int (*frame_lasti)(py_object *frame); /* optional: 3.11 and later */
	int (*gc_disable)(void);              /* optional: 3.10 and later */
	int (*gc_enable)(void);
	void (*incref)(py_object *o);
	void (*decref)(py_object *o);
	py_object *(*getattr)(py_object *o, const char *name);
	const char *(*utf8)(py_object *s);
	void (*err_clear)(void);
	py_object *(*err_get)(void);          /* optional (3.12 and later), else err_fetch */
	void (*err_set)(py_object *e);
	void (*err_fetch)(py_object **t, py_object **v, py_object **tb);
	void (*err_restore)(py_object *t, py_object *v, py_object *tb);
};

static struct py_api api;          /* written once, before R1 */
static bool nogil;                 /* frames readable without the GIL (pyread.h); written before R1 */
static _Atomic bool ready;
static uintptr_t interpreter_base; /* written once, before R1 */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

/* --- the tables ------------------------------------------------------------------ */

/* A code object seen in some stack. Seen under the GIL, a reference is kept,
 * so that its address is never reused for another one while a word names
 * it; read without the GIL (no reference can be taken), `code` is NULL and
 * the slot's key tells it from a later object at the same address. */
struct py_code {
	py_object *code;
	const char *function;
	const char *file;
};

/* Ids run from 1; entries live in leaves that never move, under a fixed top. */
#define GMT_PY_LEAF_BITS 12
#define GMT_PY_LEAF ((uint32_t)1 << GMT_PY_LEAF_BITS)
#define GMT_PY_TOP 4096u
#define GMT_PY_MAX_CODES (GMT_PY_TOP * GMT_PY_LEAF) /* 2^24: fits the word's 31 bits */

static struct py_code *code_leaf[GMT_PY_TOP]; /* under lock; readers after A2 */
static _Atomic uint32_t ncodes;

/* One hash set maps both (code, POS_CODE) → code id and (code, instruction
 * offset) → code id and line, so that a frame seen before costs one probe.
 * Code objects read without the GIL have keys of their own: (code,
 * POS_CODE_NOGIL) and (code, POS_NOGIL | address), each with the code's key
 * (struct gmt__pyframe), which must match. Open addressing, at most half
 * full; only ever touched under the lock, so growing frees the old array at
 * once. */
#define POS_CODE UINT32_MAX
#define POS_CODE_NOGIL (UINT32_MAX - 1)
#define POS_NOGIL 0x80000000u

struct py_slot {
	uintptr_t code; /* 0: free */
	uint32_t pos;
	uint32_t id;
	uint32_t line;
	uint64_t key; /* read without the GIL: the code object's key; else 0 */
};

static struct py_slot *slots;
static size_t nslots, used;

/* Names are copied into chunks that are never freed. */
#define GMT_PY_CHUNK ((size_t)64 << 10)
#define GMT_PY_NAME_MAX 4096
static char *names_next, *names_end;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_hash(uintptr_t code, uint32_t pos)
{
	uint64_t h = ((uint64_t)code >> 4) * 0x9e3779b97f4a7c15ull ^ (uint64_t)pos * 0xc2b2ae3d27d4eb4full;

	return (size_t)(h ^ h >> 29);
}

/* Under lock, with the set allocated: the slot of (code, pos), or the free
 * slot where it would go. */
static struct py_slot *slot_find(uintptr_t code, uint32_t pos)
{
	size_t mask = nslots - 1, i;

	for (i = slot_hash(code, pos) & mask; slots[i].code != 0; i = (i + 1) & mask) {
		if (slots[i].code == code && slots[i].pos == pos)
			break;
	}
	return &slots[i];
}

/* Under lock: room for one more pair. Returns 0 or -ENOMEM. */
static int slots_reserve(void)
{
	struct py_slot *old = slots;
	size_t oldn = nslots, i;

	if (nslots != 0 && 2 * (used + 1) <= nslots)
		return 0;
	slots = gmt__map((oldn ? 2 * oldn : 4096) * sizeof(*slots));
	if (slots == NULL) {
		slots = old;
		return -ENOMEM;
	}
	nslots = oldn ? 2 * oldn : 4096;
	for (i = 0; i < oldn; i++) {
		if (old[i].code != 0)
			*slot_find(old[i].code, old[i].pos) = old[i];
	}
	if (old != NULL)
		munmap(old, oldn * sizeof(*old));
	return 0;
}

/* Under lock: a copy of s (cut to GMT_PY_NAME_MAX - 1 bytes), or NULL. */
static const char *name_copy(const char *s)
{
	size_t len = strnlen(s, GMT_PY_NAME_MAX - 1);
	char *p;

	if ((size_t)(names_end - names_next) < len + 1) {
		p = gmt__map(GMT_PY_CHUNK);
		if (p == NULL)
			return NULL;
		names_next = p;
		names_end = p + GMT_PY_CHUNK;
	}
	p = names_next;
	memcpy(p, s, len);
	p[len] = '\0';
	names_next += len + 1;
	return p;
}

/* Under lock, with the GIL: the string attribute `attr` of a code object,
 * copied; NULL (and no exception left set) when it has none. */
static const char *code_string(py_object *code, const char *attr)
{
	py_object *v = api.getattr(code, attr);
	const char *s, *copy = NULL;

	if (v == NULL) {
		api.err_clear();
		return NULL;
	}
	s = api.utf8(v);
	if (s != NULL)
		copy = name_copy(s);
	else
		api.err_clear();
	api.decref(v);
	return copy;
}

/* Under lock: the entry of the next code id, its leaf allocated, with room
 * for one more slot; NULL when the tables are full or out of memory. */
static struct py_code *code_next(uint32_t *id)
{
	struct py_code *leaf;

	*id = atomic_load_explicit(&ncodes, memory_order_relaxed) + 1;
	if (*id >= GMT_PY_MAX_CODES || slots_reserve() < 0)
		return NULL;
	leaf = code_leaf[*id >> GMT_PY_LEAF_BITS];
	if (leaf == NULL) {
		leaf = gmt__map(GMT_PY_LEAF * sizeof(*leaf));
		if (leaf == NULL)
			return NULL;
		code_leaf[*id >> GMT_PY_LEAF_BITS] = leaf;
	}
	return &leaf[*id & (GMT_PY_LEAF - 1)];
}

/* Under lock: publishes the entry code_next gave `id`, filled in, and files
 * it under (code, pos) with `key` (replacing an entry of an object that had
 * the address before). */
static void code_publish(uint32_t id, uintptr_t code, uint32_t pos, uint64_t key)
{
	struct py_slot *s;

	/* R2: release of the count publishes the entry (and its leaf); pairs
	 * with A2 in gmt__py_frame. */
	atomic_store_explicit(&ncodes, id, memory_order_release);
	s = slot_find(code, pos);
	if (s->code == 0)
		used++;
	*s = (struct py_slot){ .code = code, .pos = pos, .id = id, .key = key };
}

/* Under lock, with the GIL: the id of a code object, registering it when new;
 * 0 when the tables are full or out of memory. */
static uint32_t code_id(py_object *code)
{
	struct py_slot *s = slot_find((uintptr_t)code, POS_CODE);
	struct py_code *c;
	uint32_t id;

	if (s->code != 0)
		return s->id;
	c = code_next(&id);
	if (c == NULL)
		return 0;
	/* 3.11 added qualified names ("Model.forward"); 3.11 is also when
	 * PyFrame_GetLasti appeared. */
	*c = (struct py_code){
		.code = code,
		.function = (api.frame_lasti != NULL ? code_string(code, "co_qualname") : NULL),
		.file = code_string(code, "co_filename"),
	};
	if (c->function == NULL)
		c->function = code_string(code, "co_name");
	api.incref(code);
	code_publish(id, (uintptr_t)code, POS_CODE, 0);
	return id;
}

/* Under lock, with the GIL: the word for a frame, 0 when the tables are full
 * or out of memory. NOTE: computing a line walks the code's line table from
 * the start (PyCode_Addr2Line), so on 3.11 and later, where the instruction
 * offset is public, each (code, offset) is looked up once and remembered
 * with the code's id. */
static uintptr_t frame_word(py_object *frame, py_object *code)
{
	struct py_slot *s = NULL;
	uint32_t id;
	int lasti = api.frame_lasti != NULL ? api.frame_lasti(frame) : -1, line;

	if (lasti >= 0) {
		s = slot_find((uintptr_t)code, (uint32_t)lasti);
		if (s->code != 0)
			return GMT_WORD_PYTHON | (uintptr_t)s->id << 32 | s->line;
	}
	id = code_id(code);
	if (id == 0)
		return 0;
	line = api.frame_line(frame);
	line = line > 0 ? line : 0;
	if (lasti >= 0 && slots_reserve() == 0) {
		s = slot_find((uintptr_t)code, (uint32_t)lasti);
		*s = (struct py_slot){ .code = (uintptr_t)code, .pos = (uint32_t)lasti, .id = id, .line = (uint32_t)line };
		used++;
	}
	return GMT_WORD_PYTHON | (uintptr_t)id << 32 | (uint32_t)line;
}

/* Under lock, without the GIL: the id of the code object at `code` whose key
 * is `key`, registering it (names read from memory) when new or when the
 * address now holds another object; 0 when unreadable, full or out of
 * memory. */
static uint32_t code_id_nogil(uintptr_t code, uint64_t key)
{
	struct py_slot *s = slot_find(code, POS_CODE_NOGIL);
	char function[GMT_PY_NAME_MAX], file[GMT_PY_NAME_MAX];
	struct py_code *c;
	uint32_t id;

	if (s->code != 0 && s->key == key)
		return s->id;
	if (gmt__pyread_code_names(code, function, sizeof(function), file, sizeof(file)) != 0)
		return 0;
	c = code_next(&id);
	if (c == NULL)
		return 0;
	*c = (struct py_code){ .code = NULL, .function = name_copy(function), .file = name_copy(file) };
	code_publish(id, code, POS_CODE_NOGIL, key);
	return id;
}

/* Under lock, without the GIL: the word of one frame read from memory, 0
 * when it cannot be read consistently. */
static uintptr_t frame_word_nogil(const struct gmt__pyframe *f)
{
	uint32_t pos = POS_NOGIL | ((uint32_t)(f->addr + 2) & ~POS_NOGIL), id;
	struct py_slot *s;
	uint64_t key = f->key;
	int line;

	/* A (code, instruction) seen before: one probe gives id and line. */
	s = slot_find(f->code, pos);
	if (s->code != 0 && s->key == key && f->traced_line <= 0)
		return GMT_WORD_PYTHON | (uintptr_t)s->id << 32 | s->line;
	id = code_id_nogil(f->code, key);
	if (id == 0)
		return 0;
	if (f->traced_line > 0)
		return GMT_WORD_PYTHON | (uintptr_t)id << 32 | (uint32_t)f->traced_line;
	if (gmt__pyread_line(f->code, f->addr, &line) != 0)
		return 0;
	if (slots_reserve() == 0) {
		s = slot_find(f->code, pos);
		if (s->code == 0)
			used++;
		*s = (struct py_slot){ .code = f->code, .pos = pos, .id = id, .line = (uint32_t)line, .key = key };
	}
	return GMT_WORD_PYTHON | (uintptr_t)id << 32 | (uint32_t)line;
}

/* The frames of `tstate`, a thread state of this thread that does not hold
 * the GIL, read from memory (pyread.h). A frame that cannot be read
 * consistently is dropped and counted; one whose caller cannot be read ends
 * the walk. At most GMT_PY_WALK_MAX frames are visited (a loop in corrupt
 * memory cannot hold the thread). */
#define GMT_PY_WALK_MAX 4096

static int capture_nogil(uintptr_t tstate, uintptr_t *out, int max, struct gmt__py_capture_info *info)
{
	struct gmt__pyframe f;
	uintptr_t frame;
	int n = 0, walked = 0;

	pthread_mutex_lock(&lock);
	gmt__pyread_begin();
	if (nslots == 0 && slots_reserve() < 0) {
		frame = 0;
	} else if (gmt__pyread_first(tstate, &frame) != 0) {
		info->dropped++;
		frame = 0;
	}
	while (frame != 0 && n < max && walked++ < GMT_PY_WALK_MAX) {
		uintptr_t word;

		if (gmt__pyread_frame(frame, &f) != 0) {
			info->dropped++;
			break;
		}
		if (!f.skip) {
			word = frame_word_nogil(&f);
			if (word != 0)
				out[n++] = word;
			else
				info->dropped++;
		}
		frame = f.previous;
	}
	pthread_mutex_unlock(&lock);
	info->nogil = n > 0;
	return n;
}

/* --- capture ----------------------------------------------------------------------- */

int gmt__py_capture(uintptr_t *out, int max, struct gmt__py_capture_info *info)
{
	py_object *tstate, *frame, *err = NULL, *et = NULL, *ev = NULL, *etb = NULL;
	int n = 0, gc_was_on = 0;

	*info = (struct gmt__py_capture_info){ 0 };
	/* A1: acquire of `ready`; pairs with R1 in gmt__py_probe: the table of
	 * functions is complete. */
	if (max <= 0 || !atomic_load_explicit(&ready, memory_order_acquire))
		return 0;
	if (!api.is_initialized())
		return 0;
	/* Holding the GIL means: a thread state is attached, and it is this
	 * thread's own. NOTE: both halves are needed. Before 3.12 the attached
	 * state is the one global "current" state, which may be another
	 * thread's; and PyGILState_Check, which compares the two, answers 1 for
	 * every thread once a subinterpreter exists. A thread with a state of
	 * its own that does not hold the GIL (it released it around this call)
	 * has its frames read from memory. */
	tstate = api.gilstate_this();
	if (tstate == NULL)
		return 0;
	if (api.tstate_unchecked() != tstate)
		return nogil ? capture_nogil((uintptr_t)tstate, out, max, info) : 0;

	/* NOTE: on 3.11+ reading a frame may create its frame object, and an
	 * allocation may start the garbage collector, whose finalisers may free
	 * device memory — a call this hook would not record (only the outermost
	 * call does). Collection waits until we are done. */
	if (api.err_get != NULL)
		err = api.err_get();
	else
		api.err_fetch(&et, &ev, &etb);
	if (api.gc_disable != NULL)
		gc_was_on = api.gc_disable();

	frame = api.tstate_frame(tstate);
	pthread_mutex_lock(&lock);
	if (nslots == 0 && slots_reserve() < 0)
		max = 0; /* no memory: no Python frames */
	while (frame != NULL && n < max) {
		py_object *code = api.frame_code(frame), *back;
		uintptr_t word = frame_word(frame, code);

		if (word != 0)
			out[n++] = word;
		api.decref(code);
		back = api.frame_back(frame);
		api.decref(frame);
		frame = back;
	}
	pthread_mutex_unlock(&lock);
	if (frame != NULL)
		api.decref(frame);

	if (gc_was_on)
		api.gc_enable();
	/* A failed frame read (no memory) must not leave an exception behind. */
	if (api.err_get != NULL) {
		api.err_clear();
		api.err_set(err);
	} else {
		api.err_restore(et, ev, etb);
	}
	return n;
}

int gmt__py_frame(uintptr_t word, const char **function, const char **file, int *line)
{
	uint32_t id = (uint32_t)((word & ~GMT_WORD_TAG) >> 32);
	const struct py_code *c;

	/* A2: acquire of the count; pairs with R2 in code_id. */
	if (!gmt__word_is_python(word) || id == 0 || id > atomic_load_explicit(&ncodes, memory_order_acquire))
		return -ENOENT;
	c = &code_leaf[id >> GMT_PY_LEAF_BITS][id & (GMT_PY_LEAF - 1)];
	*function = c->function;
	*file = c->file;
	*line = (int)(uint32_t)word;
	return 0;
}

/* --- the probe ---------------------------------------------------------------------- */

/* A libpython some extension loader opened RTLD_LOCAL (an embedding program),
 * by its path: dl_iterate_phdr's callback. */
static int find_libpython(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *base = strrchr(info->dlpi_name, '/');

	(void)size;
	base = base != NULL ? base + 1 : info->dlpi_name;
	if (strncmp(base, "libpython3.", 11) != 0)
		return 0;
	*(void **)arg = gmt__dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	return *(void **)arg != NULL;
}

/* dlsym into a function pointer field (C has no cast between the two). */
static void *lookup(void *handle, void *field, const char *name)
{
	void *sym = dlsym(handle, name);

	memcpy(field, &sym, sizeof(sym));
	return sym;
}

/* Fills *p from `handle`; true when everything required is there. */
static bool lookup_api(void *handle, struct py_api *p)
{
	if (lookup(handle, &p->tstate_unchecked, "PyThreadState_GetUnchecked") == NULL)
		lookup(handle, &p->tstate_unchecked, "_PyThreadState_UncheckedGet");
	lookup(handle, &p->gilstate_this, "PyGILState_GetThisThreadState");
	lookup(handle, &p->tstate_frame, "PyThreadState_GetFrame");
	lookup(handle, &p->frame_code, "PyFrame_GetCode");
	lookup(handle, &p->frame_back, "PyFrame_GetBack");
	lookup(handle, &p->frame_line, "PyFrame_GetLineNumber");
	lookup(handle, &p->frame_lasti, "PyFrame_GetLasti");
	lookup(handle, &p->gc_disable, "PyGC_Disable");
	lookup(handle, &p->gc_enable, "PyGC_Enable");
	lookup(handle, &p->incref, "Py_IncRef");
	lookup(handle, &p->decref, "Py_DecRef");
	lookup(handle, &p->getattr, "PyObject_GetAttrString");
	lookup(handle, &p->utf8, "PyUnicode_AsUTF8");
	lookup(handle, &p->err_clear, "PyErr_Clear");
	lookup(handle, &p->err_get, "PyErr_GetRaisedException");
	lookup(handle, &p->err_set, "PyErr_SetRaisedException");
	lookup(handle, &p->err_fetch, "PyErr_Fetch");
	lookup(handle, &p->err_restore, "PyErr_Restore");
	if (p->err_get == NULL || p->err_set == NULL) {
		p->err_get = NULL;
		p->err_set = NULL;
	}
	if (p->gc_disable == NULL || p->gc_enable == NULL) {
		/* 3.11+ creates frame objects while walking: it needs the GC off. */
		if (p->frame_lasti != NULL)
			return false;
		p->gc_disable = NULL;
		p->gc_enable = NULL;
	}
	return p->tstate_unchecked && p->gilstate_this && p->tstate_frame && p->frame_code && p->frame_back &&
	       p->frame_line && p->incref && p->decref && p->getattr && p->utf8 && p->err_clear &&
	       (p->err_get != NULL || (p->err_fetch && p->err_restore));
}

bool gmt__py_probe(void)
{
	struct py_api p = { 0 };
	void *h = RTLD_DEFAULT, *sym, *local = NULL;
	Dl_info where;
	bool ok;

	if (atomic_load_explicit(&ready, memory_order_acquire))
		return true;
	pthread_mutex_lock(&probe_lock);
	if (atomic_load_explicit(&ready, memory_order_relaxed)) {
		pthread_mutex_unlock(&probe_lock);
		return true;
	}
	/* NOTE: RTLD_DEFAULT is the null pointer. A handle from RTLD_NOLOAD
	 * holds a reference, which is kept: the interpreter is never unloaded
	 * under recorded words. */
	sym = lookup(h, &p.is_initialized, "Py_IsInitialized");
	if (sym == NULL) {
		dl_iterate_phdr(find_libpython, &local);
		if (local != NULL)
			sym = lookup(h = local, &p.is_initialized, "Py_IsInitialized");
	}
	ok = sym != NULL && lookup_api(h, &p);
	if (ok) {
		const char *why = NULL;

		api = p;
		nogil = gmt__pyread_setup(h, &why);
		if (!nogil)
			gmt__info("Python frames only where the GIL is held: %s", why);
		if (dladdr(sym, &where) != 0)
			interpreter_base = (uintptr_t)where.dli_fbase;
		/* R1: release of `ready` publishes the table; pairs with A1. */
		atomic_store_explicit(&ready, true, memory_order_release);
	} else if (local != NULL) {
		gmt__dlclose(local);
	}
	pthread_mutex_unlock(&probe_lock);
	return ok;
}

bool gmt__py_frame_per_eval(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire) && api.frame_lasti == NULL;
}

uintptr_t gmt__py_interpreter_base(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire) ? interpreter_base : 0;
}

bool gmt__py_is_eval_function(const char *function)
{
	/* NOTE: the loop of every version since 3.6; GCC may split off a cold
	 * part, named with a suffix ("_PyEval_EvalFrameDefault.cold"). The
	 * inline wrapper _PyEval_EvalFrame is not the loop: matching it too
	 * would count each entry twice where the debug information has it. */
	static const char eval[] = "_PyEval_EvalFrameDefault";

	return function != NULL && strncmp(function, eval, sizeof(eval) - 1) == 0 &&
	       (function[sizeof(eval) - 1] == '\0' || function[sizeof(eval) - 1] == '.');
}

void gmt__py_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
	pthread_mutex_init(&probe_lock, NULL);
}
