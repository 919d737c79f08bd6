/*
 * What built-in kernels may ask of the executor's thread pool beyond ctx->parallel_for
 * (core/src/threadpool.c). Internal to the core, like blas.h beside it: not installed.
 */
#ifndef GE_HUB_INTERNAL_THREADPOOL_H
#define GE_HUB_INTERNAL_THREADPOOL_H

/* Threads a parallel loop may use, the caller included (>= 1): kernels size their tiles
 * by it. */
int ge_threadpool_size(void);

#endif /* GE_HUB_INTERNAL_THREADPOOL_H */
