/* The tracer's own calls that change the dynamic loader's state (dlopen,
 * dlclose), serialised with fork. glibc's fork does not wait for a dlopen in
 * another thread: the child inherits the loader's data as that call left it
 * (its cache of ld.so.cache mapped or half unmapped, a link map half built)
 * and its lock reset, and the child's next dlopen can fault. The tracer
 * writes snapshots from its own thread and from any thread calling
 * gmt_dump(); a program that forks at any moment (a data loader's workers)
 * must get children whose fate does not depend on where those writes were.
 * So each of the tracer's own loader calls runs under one lock, which the
 * tracer's fork handler takes before the fork (tracer/core.c).
 *
 * NOTE: nothing that takes another of the tracer's locks may run inside
 * (the fork handler takes this one last). Read-only calls (dladdr,
 * dl_iterate_phdr, dlsym) need no lock: what they read is consistent
 * whenever no call changes it. */
#ifndef GMT_LOADER_H
#define GMT_LOADER_H

/* dlopen and dlclose under the lock. */
void *gmt__dlopen(const char *name, int mode);
void gmt__dlclose(void *handle);

/* The fork handler's: prepare takes the lock, parent and child release it. */
void gmt__loader_fork_prepare(void);
void gmt__loader_fork_parent(void);
void gmt__loader_fork_child(void);

#endif
