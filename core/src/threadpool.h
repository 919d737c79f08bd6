/*
 * The executor's thread pool: what `ctx->parallel_for` runs on.
 *
 * One process-wide pool of worker threads, started on first use. Its size is the number
 * of CPUs this process may run on, or GE_HUB_NUM_THREADS when set; the thread calling
 * parallel_for works too, so the pool starts size - 1 workers. A worker polls for the
 * next loop after each one (GE_HUB_SPIN_US, 1 ms by default), then sleeps on a condition
 * variable; an idle pool uses no CPU. One parallel loop uses the pool at a time: a loop
 * that finds it busy (another run's kernel, or a parallel_for nested in a chunk) runs
 * inline on its own thread, which keeps concurrent runs correct and free of deadlock.
 */
#ifndef GE_HUB_THREADPOOL_H
#define GE_HUB_THREADPOOL_H

#include "ge_hub/internal/threadpool.h"  /* ge_threadpool_size: what kernels call */
#include "ge_hub/kernel.h"

/* Sets whether parallel loops started on this thread run inline (1) or may use the pool
 * (0); returns the previous setting. The executor sets it around a step planned to run
 * on its calling thread alone (threads 1: too small to be worth waking the pool, or one
 * of several streams running at once). */
int ge_threadpool_serial(int serial);

/* ge_context.parallel_for: fn over [0, n) in chunks of at least `grain` items. */
void ge_parallel_for(ge_context *ctx, int64_t n, int64_t grain, ge_range_fn fn, void *arg);

#endif /* GE_HUB_THREADPOOL_H */
