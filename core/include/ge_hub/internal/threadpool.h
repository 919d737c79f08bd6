/*
 * What built-in kernels may ask of the executor's thread pool beyond ctx->parallel_for
 * (core/src/threadpool.c). Internal to the core, like blas.h beside it: not installed.
 */
#ifndef GE_HUB_INTERNAL_THREADPOOL_H
#define GE_HUB_INTERNAL_THREADPOOL_H

#include <stddef.h>

/* Threads a parallel loop may use, the caller included (>= 1): kernels size their tiles
 * by it. */
int ge_threadpool_size(void);

/* A work area of at least `bytes` bytes (64-byte aligned) that belongs to the calling
 * thread: the same memory on every call that asks for no more than before (grown when
 * asked for more, freed when the thread exits), or NULL when it cannot be allocated. A
 * kernel whose loop chunks each need a scratch area takes it here rather than from the
 * plan's scratch, so that a thread always works in memory its own core's caches hold: a
 * plan's scratch is shared by every step, and one step's area for a chunk overlaps the
 * area another thread used in the step before. One user at a time per thread (no kernel
 * that uses it may call another that does). */
void *ge_thread_workspace(size_t bytes);

#endif /* GE_HUB_INTERNAL_THREADPOOL_H */
