/* Binds the glibc functions that moved into libc.so.6 in glibc 2.32 and 2.34
 * (taking new symbol versions there) to their original versions, so that
 * libgpumemtrace.so loads on every glibc from 2.17 on (docs/internals.md,
 * "Portability"). Force-included into every tracer source by src/meson.build;
 * tests/preload/check_library.py checks the result. */
#ifndef GMT_GLIBC_COMPAT_H
#define GMT_GLIBC_COMPAT_H

#if defined(__x86_64__)
#define GMT_GLIBC_BASE "GLIBC_2.2.5"
#define GMT_GLIBC_DLADDR1 "GLIBC_2.3.3"
#define GMT_GLIBC_SETNAME "GLIBC_2.12"
#elif defined(__aarch64__)
#define GMT_GLIBC_BASE "GLIBC_2.17"
#define GMT_GLIBC_DLADDR1 "GLIBC_2.17"
#define GMT_GLIBC_SETNAME "GLIBC_2.17"
#endif

#ifdef GMT_GLIBC_BASE
/* NOTE: glibc >= 2.34 keeps these old versions as compatibility symbols of
 * libc.so.6; older ones define them in libpthread.so.0 and libdl.so.2, which the
 * library links explicitly (--no-as-needed). */
#define GMT_GLIBC_PIN(sym, ver) __asm__(".symver " #sym "," #sym "@" ver)
/* dlclose is not pinned: the library defines it (hooks.c), and reaches
 * glibc's through dlvsym (modules.c), as it does dlsym. */
GMT_GLIBC_PIN(dlopen, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(dlerror, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(dlvsym, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(dladdr, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(dladdr1, GMT_GLIBC_DLADDR1);
GMT_GLIBC_PIN(pthread_create, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_detach, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_getattr_np, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_attr_getstack, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_key_create, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_mutex_trylock, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_once, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_setspecific, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_getspecific, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_sigmask, GMT_GLIBC_BASE);
GMT_GLIBC_PIN(pthread_setname_np, GMT_GLIBC_SETNAME);
#undef GMT_GLIBC_PIN
#endif

#endif /* GMT_GLIBC_COMPAT_H */
