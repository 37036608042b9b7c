/* The site rule (src/analyze/sites.c) on made-up stacks of the shapes real
 * programs have: PyTorch's libraries and Python packages above the
 * program's code, a ctypes call through libffi, a statically linked runtime,
 * a library allocating on its own, the user's patterns; and which stacks are
 * one site, how labels tell sites apart, and which failures are one call of
 * the program (the episode rule's call sites). */
#define _GNU_SOURCE
#include "check.h"

#include "analyze/sites.h"

#include <stdio.h>
#include <string.h>

#define N(m, fn) { .module = (m), .function = (fn) }
#define NL(m, fn, fl, ln) { .module = (m), .function = (fn), .file = (fl), .line = (ln) }
#define PY(fn, fl, ln) { .python = true, .function = (fn), .file = (fl), .line = (ln) }

#define LIBCUDA "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
#define CUDART "/usr/local/cuda/lib64/libcudart.so.13"
#define TORCH "/venv/lib/python3.11/site-packages/torch/lib/"
#define PYTHON "/usr/bin/python3.11"

/* A PyTorch program: the driver, the runtime, c10's caching allocator,
 * libtorch, torch's Python code in site-packages, the program's code, the
 * interpreter and the C runtime. */
static const struct gmt__site_frame torch_stack[] = {
	N(LIBCUDA, "cuMemAlloc_v2"),
	N(CUDART, "cudaMalloc"),
	NL(TORCH "libc10_cuda.so", "c10::cuda::CUDACachingAllocator::malloc", "CUDACachingAllocator.cpp", 1020),
	N(TORCH "libtorch_cuda.so", "at::native::empty_cuda"),
	N(TORCH "libtorch_python.so", "THPVariable_make"),
	PY("Linear.forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125),
	PY("Module._call_impl", "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1750),
	PY("Model.forward", "/home/me/proj/train.py", 29),
	PY("train", "/home/me/proj/train.py", 38),
	PY("<module>", "/home/me/proj/train.py", 40),
	N(PYTHON, "Py_RunMain"),
	N("/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_main"),
	N(PYTHON, "_start"),
};

/* The same chain of the program's code reached through other library
 * frames: the same site. */
static const struct gmt__site_frame torch_other_path[] = {
	N(LIBCUDA, "cuMemAlloc_v2"),
	N(CUDART, "cudaMalloc"),
	N(TORCH "libc10_cuda.so", "c10::cuda::CUDACachingAllocator::mallocRetry"),
	PY("Conv2d.forward", "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py", 554),
	PY("Model.forward", "/home/me/proj/train.py", 29),
	PY("train", "/home/me/proj/train.py", 38),
	PY("<module>", "/home/me/proj/train.py", 40),
};

/* ctypes: the program's Tensor class allocates for weights (from
 * Model.__init__) and for activations (from Model.forward) at one line. */
static const struct gmt__site_frame weights[] = {
	N(LIBCUDA, "cuMemAlloc_v2"),
	N(CUDART, "cudaMalloc"),
	{ .module = "/lib/x86_64-linux-gnu/libffi.so.8", .offset = 0x6f7a },
	N("/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", "_ctypes_callproc"),
	N("/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "_PyObject_MakeTpCall"),
	PY("_FuncPtr.__call__", "/usr/lib/python3.11/ctypes/__init__.py", 400),
	PY("Tensor.__init__", "/home/me/proj/train.py", 16),
	PY("Model.__init__", "/home/me/proj/train.py", 22),
	PY("main", "/home/me/proj/train.py", 45),
};

static const struct gmt__site_frame activations[] = {
	N(LIBCUDA, "cuMemAlloc_v2"),
	N(CUDART, "cudaMalloc"),
	{ .module = "/lib/x86_64-linux-gnu/libffi.so.8", .offset = 0x6f7a },
	PY("Tensor.__init__", "/home/me/proj/train.py", 16),
	PY("Model.forward", "/home/me/proj/train.py", 29),
	PY("main", "/home/me/proj/train.py", 46),
};

/* A static runtime: its internals lie in the program's own module, and the
 * helper under cudaMallocAsync has no CUDA name: what CUDA's frames called is
 * CUDA's. */
static const struct gmt__site_frame static_runtime[] = {
	N(LIBCUDA, "cuMemAllocAsync"),
	N("/app/train", "malloc_async_helper"),
	N("/app/train", "cudaMallocAsync"),
	NL("/app/train", "device_alloc", "/app/src/train.cu", 101),
	NL("/app/train", "main", "/app/src/train.cu", 168),
	N("/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_call_main"),
	N("/app/train", "_start"),
};

/* cuBLAS allocating its workspace on a thread of its own: no frame of the
 * program's, so the innermost beyond the CUDA call names the site. */
static const struct gmt__site_frame library_only[] = {
	N(LIBCUDA, "cuMemAlloc_v2"),
	N(CUDART, "cudaMalloc"),
	N("/usr/local/cuda/lib64/libcublas.so.13", "cublasCreate_v2"),
	N("/lib/x86_64-linux-gnu/libc.so.6", "start_thread"),
};

static const struct gmt__site_frame *stack_of[] = { torch_stack, torch_other_path, weights, activations,
						    static_runtime, library_only };
static const int depth_of[] = {
	sizeof(torch_stack) / sizeof(torch_stack[0]), sizeof(torch_other_path) / sizeof(torch_other_path[0]),
	sizeof(weights) / sizeof(weights[0]), sizeof(activations) / sizeof(activations[0]),
	sizeof(static_runtime) / sizeof(static_runtime[0]), sizeof(library_only) / sizeof(library_only[0]),
};
#define NSTACKS (sizeof(stack_of) / sizeof(stack_of[0]))

static void build(struct gmt__sites *s, const struct gmt__site_frame *const *stacks, const int *depths, size_t n,
		  const char *user)
{
	struct gmt__site_rules rules;

	CHECK_INT(gmt__site_rules_init(&rules, user), 0);
	CHECK_INT(gmt__sites_begin(s, n), 0);
	for (size_t i = 0; i < n; i++)
		CHECK_INT(gmt__sites_add(s, i, stacks[i], depths[i], &rules), 0);
	CHECK_INT(gmt__sites_finish(s), 0);
	gmt__site_rules_free(&rules);
}

static void test_shapes(void)
{
	struct gmt__sites s;

	build(&s, stack_of, depth_of, NSTACKS, NULL);
	/* The program's own code names each site. */
	CHECK(s.v[0].user && s.v[0].frame == 7);
	CHECK_STR(s.v[0].label, "Model.forward (train.py:29)");
	CHECK(s.v[0].roles[0] == GMT_ROLE_CUDA && s.v[0].roles[1] == GMT_ROLE_CUDA);
	for (int i = 2; i < 7; i++)
		CHECK(s.v[0].roles[i] == GMT_ROLE_LIBRARY);
	CHECK(s.v[0].roles[8] == GMT_ROLE_USER && s.v[0].roles[9] == GMT_ROLE_USER);
	for (int i = 10; i < 13; i++)
		CHECK(s.v[0].roles[i] == GMT_ROLE_LIBRARY);
	/* Other library frames, the same chain of the program's: one site. */
	CHECK_INT(s.v[1].site, s.v[0].site);
	CHECK(s.v[1].frame == 4 && s.v[1].label == s.v[0].label);
	/* One constructor, two call chains: two sites, told apart by the caller. */
	CHECK(s.v[2].site != s.v[3].site && s.v[2].site != s.v[0].site);
	CHECK(s.v[2].frame == 6 && s.v[3].frame == 3);
	CHECK_STR(s.v[2].label, "Tensor.__init__ (train.py:16) \u2190 Model.__init__ (train.py:22)");
	CHECK_STR(s.v[3].label, "Tensor.__init__ (train.py:16) \u2190 Model.forward (train.py:29)");
	/* The static runtime's frames are CUDA's; startup frames are nobody's. */
	CHECK(s.v[4].frame == 3 && s.v[4].user);
	CHECK(s.v[4].roles[1] == GMT_ROLE_CUDA && s.v[4].roles[2] == GMT_ROLE_CUDA);
	CHECK(s.v[4].roles[5] == GMT_ROLE_LIBRARY && s.v[4].roles[6] == GMT_ROLE_LIBRARY);
	CHECK_STR(s.v[4].label, "device_alloc (train.cu:101)");
	/* No frame of the program's. */
	CHECK(!s.v[5].user && s.v[5].frame == 2);
	CHECK_STR(s.v[5].label, "cublasCreate_v2 (libcublas.so.13)");
	CHECK_INT(s.nsites, 5);
	/* Ids in the order of the sites' first stacks. */
	CHECK(s.v[0].site == 1 && s.v[2].site == 2 && s.v[3].site == 3 && s.v[4].site == 4 && s.v[5].site == 5);
	gmt__sites_free(&s);
}

/* The user's patterns: "!" makes code the program's, a pattern makes a
 * library, "nobuiltin" drops the built-in list. */
static void test_user_patterns(void)
{
	static const struct gmt__site_frame mine[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),
		PY("Pool.take", "/venv/lib/python3.11/site-packages/mylib/pool.py", 12),
		NL("/app/vendor/libarena.so", "arena_grow", "arena.c", 40),
		PY("step", "/home/me/proj/train.py", 50),
	};
	/* The program's own library vendored beside others it does not own. */
	static const struct gmt__site_frame vendor[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),
		NL("/app/vendor/mine/libmine.so", "mine_alloc", "mine.c", 7),
		NL("/app/vendor/libarena.so", "arena_grow", "arena.c", 40),
		PY("step", "/home/me/proj/train.py", 50),
	};
	const struct gmt__site_frame *one[] = { mine };
	const int depth[] = { sizeof(mine) / sizeof(mine[0]) };
	const struct gmt__site_frame *vendored[] = { vendor };
	const int vdepth[] = { sizeof(vendor) / sizeof(vendor[0]) };
	const struct gmt__site_frame *torch[] = { torch_stack };
	const int tdepth[] = { depth_of[0] };
	struct gmt__sites s;

	build(&s, one, depth, 1, NULL);
	CHECK_STR(s.v[0].label, "arena_grow (arena.c:40)");
	gmt__sites_free(&s);
	build(&s, one, depth, 1, " */vendor/* , !*/site-packages/mylib/*");
	CHECK_STR(s.v[0].label, "Pool.take (pool.py:12)");
	CHECK(s.v[0].roles[2] == GMT_ROLE_LIBRARY);
	gmt__sites_free(&s);
	build(&s, one, depth, 1, "libarena.so");
	CHECK_STR(s.v[0].label, "step (train.py:50)");
	gmt__sites_free(&s);
	/* A pattern and a "!" pattern that match one path: the "!" wins,
	 * whichever comes first in the list (docs/guide.md). */
	build(&s, vendored, vdepth, 1, "*/vendor/*,!*/vendor/mine/*");
	CHECK_STR(s.v[0].label, "mine_alloc (mine.c:7)");
	CHECK(s.v[0].roles[2] == GMT_ROLE_LIBRARY && s.v[0].roles[1] == GMT_ROLE_USER);
	gmt__sites_free(&s);
	build(&s, vendored, vdepth, 1, "!*/vendor/mine/*,*/vendor/*");
	CHECK_STR(s.v[0].label, "mine_alloc (mine.c:7)");
	gmt__sites_free(&s);
	build(&s, torch, tdepth, 1, "nobuiltin");
	CHECK_STR(s.v[0].label, "c10::cuda::CUDACachingAllocator::malloc (CUDACachingAllocator.cpp:1020)");
	gmt__sites_free(&s);
}

/* Labels take as few callers as tell their sites apart, at most
 * GMT_SITE_CALLERS; chains that differ further out stay two sites with one
 * label. A stack without frames is a site of its own. */
static void test_labels(void)
{
	static const struct gmt__site_frame a[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),   NL("/app/t", "alloc", "t.c", 1), NL("/app/t", "pool", "t.c", 2),
		NL("/app/t", "layer", "t.c", 3), NL("/app/t", "model", "t.c", 4), NL("/app/t", "main", "t.c", 5),
	};
	static const struct gmt__site_frame b[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),   NL("/app/t", "alloc", "t.c", 1), NL("/app/t", "pool", "t.c", 2),
		NL("/app/t", "other", "t.c", 9), NL("/app/t", "model", "t.c", 4), NL("/app/t", "main", "t.c", 5),
	};
	static const struct gmt__site_frame c[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),   NL("/app/t", "alloc", "t.c", 1), NL("/app/t", "pool", "t.c", 2),
		NL("/app/t", "layer", "t.c", 3), NL("/app/t", "model", "t.c", 4), NL("/app/t", "main", "t.c", 6),
	};
	static const struct gmt__site_frame d[] = {
		N(LIBCUDA, "cuMemAlloc_v2"),
		{ .module = "/app/libjit.so", .offset = 0x1f7a },
		PY("run", NULL, 0),
	};
	const struct gmt__site_frame *stacks[] = { a, b, c, d, NULL };
	const int depths[] = { 6, 6, 6, 3, 0 };
	struct gmt__sites s;

	build(&s, stacks, depths, 5, NULL);
	CHECK_INT(s.nsites, 5);
	CHECK_STR(s.v[0].label, "alloc (t.c:1) \u2190 pool (t.c:2) \u2190 layer (t.c:3) \u2190 model (t.c:4)");
	CHECK_STR(s.v[1].label, "alloc (t.c:1) \u2190 pool (t.c:2) \u2190 other (t.c:9) \u2190 model (t.c:4)");
	CHECK(s.v[2].site != s.v[0].site);
	CHECK_STR(s.v[2].label, s.v[0].label);
	CHECK_STR(s.v[3].label, "libjit.so+0x1f7a");
	CHECK(s.v[3].user && s.v[3].roles[2] == GMT_ROLE_USER);
	CHECK(s.v[4].frame == -1 && !s.v[4].user && s.v[4].nframes == 0);
	CHECK_STR(s.v[4].label, "(no frames)");
	gmt__sites_free(&s);
}

/* Many modules, each met twice: the memo of matched paths grows and answers
 * as the patterns do. */
static void test_many_paths(void)
{
	enum { NPATHS = 600 };
	static char paths[NPATHS][48];
	static struct gmt__site_frame frames[2 * NPATHS];
	const struct gmt__site_frame *one[] = { frames };
	const int depth[] = { 2 * NPATHS };
	struct gmt__sites s;
	bool ok = true;

	for (int i = 0; i < NPATHS; i++) {
		snprintf(paths[i], sizeof(paths[i]), i % 3 == 0 ? "/opt/lib/libtorch_%d.so" : "/app/libmine_%d.so", i);
		frames[i] = frames[NPATHS + i] = (struct gmt__site_frame){ .module = paths[i], .function = "f" };
	}
	build(&s, one, depth, 1, NULL);
	for (int i = 0; i < 2 * NPATHS; i++)
		ok &= s.v[0].roles[i] == (i % NPATHS % 3 == 0 ? GMT_ROLE_LIBRARY : GMT_ROLE_USER);
	CHECK(ok);
	CHECK(s.v[0].frame == 1);
	gmt__sites_free(&s);
}

static void test_frame_text(void)
{
	static const struct gmt__site_frame f[] = {
		NL("/app/t", "alloc", "/src/t.c", 7),
		N("/app/libx.so", "x_alloc"),
		{ .module = "/app/libx.so", .offset = 0x10 },
		{ .offset = 0x20 },
		PY("run", "/p/run.py", 0),
		PY(NULL, NULL, 0),
	};
	const char *want[] = { "alloc (t.c:7)", "x_alloc (libx.so)", "libx.so+0x10", "?+0x20", "run (run.py)",
			       "? (?)" };
	char buf[128];

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		CHECK_STR(gmt__site_frame_text(&f[i], buf, sizeof(buf)), want[i]);
	CHECK_STR(gmt__frame_role_name(GMT_ROLE_CUDA), "cuda");
	CHECK_STR(gmt__frame_role_name(GMT_ROLE_LIBRARY), "library");
	CHECK_STR(gmt__frame_role_name(GMT_ROLE_USER), "user");
}

/* Frames as the loader alone names them (tracer/episode.c's cache). */
#define NO(m, fn, off) { .module = (m), .function = (fn), .offset = (off) }
#define NUMBA "/usr/lib/python3/dist-packages/numba/cuda/cudadrv/driver.py"
#define PROG "/home/me/proj/phases.py"

/* The call a failure came from (gmt__site_call_frames): the chain of the
 * program's own frames, native ones by offset. */
static void test_call_sites(void)
{
	/* numba's release and retry: its _attempt_allocation asks again from
	 * another line, inside one call of the program's phase three. */
	const struct gmt__site_frame first[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/lib/x86_64-linux-gnu/libffi.so.8", NULL, 0x6f7a),
		PY("Context._attempt_allocation", NUMBA, 1442), PY("Context.memalloc", NUMBA, 1454),
		PY("phase_three", PROG, 30), PY("<module>", PROG, 52),
	};
	const struct gmt__site_frame retry[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/lib/x86_64-linux-gnu/libffi.so.8", NULL, 0x6f7a),
		PY("Context._attempt_allocation", NUMBA, 1450), PY("Context.memalloc", NUMBA, 1454),
		PY("phase_three", PROG, 30), PY("<module>", PROG, 52),
	};
	/* Phase four, after the program caught phase three's error. */
	const struct gmt__site_frame other[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/lib/x86_64-linux-gnu/libffi.so.8", NULL, 0x6f7a),
		PY("Context._attempt_allocation", NUMBA, 1442), PY("Context.memalloc", NUMBA, 1454),
		PY("phase_four", PROG, 40), PY("<module>", PROG, 53),
	};
	/* C: one function of the program, two calls (no line without debug
	 * information; the offsets differ), and a static runtime whose own
	 * frames differ under one call. */
	const struct gmt__site_frame c_first[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/app/run", "cudaMalloc", 0x5100),
		NO("/app/run", NULL, 0x2040), NO("/app/run", NULL, 0x2300),
	};
	const struct gmt__site_frame c_again[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/app/run", "cudaMalloc", 0x5180),
		NO("/app/run", NULL, 0x2040), NO("/app/run", NULL, 0x2300),
	};
	const struct gmt__site_frame c_other[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO("/app/run", "cudaMalloc", 0x5100),
		NO("/app/run", NULL, 0x2088), NO("/app/run", NULL, 0x2300),
	};
	/* A library allocating on a thread of its own: its calls look alike. */
	const struct gmt__site_frame lib_a[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO(TORCH "libc10_cuda.so", NULL, 0x9a10),
		NO(TORCH "libtorch_cpu.so", NULL, 0x40),
	};
	const struct gmt__site_frame lib_b[] = {
		NO(LIBCUDA, "cuMemAlloc_v2", 0x1200), NO(TORCH "libc10_cuda.so", NULL, 0x9b20),
		NO(TORCH "libtorch_cpu.so", NULL, 0x40),
	};
	struct gmt__site_rules rules, mine;
	uint64_t a;

#define KEY(v, r) gmt__site_call_frames((v), (int)(sizeof(v) / sizeof((v)[0])), (r))
	CHECK_INT(gmt__site_rules_init(&rules, NULL), 0);
	a = KEY(first, &rules);
	CHECK(a != 0);
	CHECK_U64(KEY(retry, &rules), a);
	CHECK(KEY(other, &rules) != a);
	CHECK_U64(KEY(c_again, &rules), KEY(c_first, &rules));
	CHECK(KEY(c_other, &rules) != KEY(c_first, &rules));
	CHECK_U64(KEY(lib_a, &rules), KEY(lib_b, &rules));
	CHECK(KEY(lib_a, &rules) != KEY(c_first, &rules));
	CHECK(gmt__site_call_frames(NULL, 0, &rules) != 0);
	/* numba named the program's own: its two lines are two calls. */
	CHECK_INT(gmt__site_rules_init(&mine, "!*/numba/*"), 0);
	CHECK(KEY(retry, &mine) != KEY(first, &mine));
#undef KEY
	gmt__site_rules_free(&mine);
	gmt__site_rules_free(&rules);
}

int main(void)
{
	test_shapes();
	test_user_patterns();
	test_labels();
	test_many_paths();
	test_frame_text();
	test_call_sites();
	if (check_failed == 0)
		printf("sites: ok\n");
	return check_failed != 0;
}
