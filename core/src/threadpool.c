/*
 * A small pthread pool for ge_parallel_for (see threadpool.h).
 *
 * A loop is cut into at most 4 chunks per thread (enough to even out uneven chunks
 * without paying for many hand-offs). Chunks are claimed through one atomic word that
 * holds the job's generation in its high half and the next chunk in its low half, so a
 * worker that wakes late, after its job finished and another began, can never claim a
 * chunk of a job it did not copy. The caller claims chunks too and then waits, on a
 * condition variable, only until every chunk is done; it never waits for workers that
 * did not take part.
 *
 * The executor's stream lanes are one such loop (one chunk per lane), so while streams
 * run concurrently the pool is theirs and their kernels' loops run inline: the threads
 * at work never exceed the pool's size.
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define CHUNKS_PER_THREAD 4
#define MAX_THREADS 256

typedef struct {
    ge_range_fn fn;
    void *arg;
    int64_t n;
    int64_t chunk;     /* items per chunk */
    uint32_t n_chunks;
} job;

typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t wake;       /* workers wait here for a new generation */
    pthread_cond_t finished;   /* the caller waits here for the last chunk */
    uint32_t generation;       /* under mutex: bumped once per job */
    job current;               /* under mutex: the job of `generation` */
    _Atomic uint64_t next;     /* generation << 32 | next unclaimed chunk */
    _Atomic uint32_t done;     /* chunks of the current job finished */
    atomic_flag busy;          /* held by the parallel_for that owns the pool */
    int n_workers;
} pool;

static _Atomic(pool *) the_pool;
static pthread_mutex_t create_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int pool_size;   /* 0 until first computed */

static int cpus_available(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int count = CPU_COUNT(&set);
        if (count > 0) {
            return count;
        }
    }
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

static int configured_size(void) {
    const char *text = getenv("GE_HUB_NUM_THREADS");
    if (text != NULL && *text != '\0') {
        char *end = NULL;
        long wanted = strtol(text, &end, 10);
        /* A malformed value falls back to the default rather than failing every run. */
        if (end != NULL && *end == '\0' && wanted >= 1) {
            return wanted > MAX_THREADS ? MAX_THREADS : (int)wanted;
        }
    }
    int cpus = cpus_available();
    return cpus > MAX_THREADS ? MAX_THREADS : cpus;
}

int ge_threadpool_size(void) {
    int size = atomic_load_explicit(&pool_size, memory_order_relaxed);
    if (size == 0) {
        size = configured_size();
        atomic_store_explicit(&pool_size, size, memory_order_relaxed);
    }
    return size;
}

static void run_chunks(pool *p, uint32_t generation, const job *work) {
    uint64_t next = atomic_load_explicit(&p->next, memory_order_acquire);
    for (;;) {
        uint32_t chunk = (uint32_t)next;
        if ((uint32_t)(next >> 32) != generation || chunk >= work->n_chunks) {
            return;
        }
        if (!atomic_compare_exchange_weak_explicit(&p->next, &next, next + 1,
                                                   memory_order_acq_rel,
                                                   memory_order_acquire)) {
            continue;
        }
        int64_t begin = (int64_t)chunk * work->chunk;
        int64_t end = begin + work->chunk < work->n ? begin + work->chunk : work->n;
        work->fn(work->arg, begin, end);
        uint32_t finished = atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1;
        if (finished == work->n_chunks) {
            /* Signal under the mutex: the caller checks `done` under it before waiting. */
            pthread_mutex_lock(&p->mutex);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mutex);
        }
        next = atomic_load_explicit(&p->next, memory_order_acquire);
    }
}

/* How long a thread polls for the next job (or for the last chunk) before it sleeps on a
 * condition variable: a kernel runs several parallel loops back to back, and a futex
 * wake-up per loop costs tens of microseconds. A few thousand pause instructions are
 * a fraction of a millisecond; an idle pool sleeps. */
#define SPIN_ROUNDS 4000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* 1 as soon as a job newer than `seen` is published, 0 after SPIN_ROUNDS polls. */
static int spin_for_job(pool *p, uint32_t seen) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        uint64_t next = atomic_load_explicit(&p->next, memory_order_acquire);
        if ((uint32_t)(next >> 32) != seen) {
            return 1;
        }
        cpu_relax();
    }
    return 0;
}

/* 1 as soon as `n_chunks` chunks are done, 0 after SPIN_ROUNDS polls. */
static int spin_for_done(pool *p, uint32_t n_chunks) {
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) >= n_chunks) {
            return 1;
        }
        cpu_relax();
    }
    return 0;
}

static void *worker_main(void *arg) {
    pool *p = arg;
    /* Generation 0 is the pool's state at creation: a worker that starts late still takes
     * part in the first job rather than waiting for the second. */
    uint32_t seen = 0;
    pthread_mutex_lock(&p->mutex);
    for (;;) {
        while (p->generation == seen) {
            pthread_cond_wait(&p->wake, &p->mutex);
        }
        seen = p->generation;
        job work = p->current;
        pthread_mutex_unlock(&p->mutex);
        run_chunks(p, seen, &work);
        spin_for_job(p, seen);  /* the next loop usually follows at once */
        pthread_mutex_lock(&p->mutex);
    }
    return NULL;
}

static pool *start_pool(int workers) {
    pool *p = calloc(1, sizeof *p);
    if (p == NULL) {
        return NULL;
    }
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    atomic_init(&p->next, 0);
    atomic_init(&p->done, 0);
    atomic_flag_clear(&p->busy);

    /* Workers run only kernel code: keep signals for the interpreter's threads. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < workers; i++) {
        pthread_t thread;
        if (pthread_create(&thread, &attr, worker_main, p) != 0) {
            break;  /* fewer workers than asked: still correct, just less parallel */
        }
        p->n_workers++;
    }
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    return p;
}

/* A child of fork() has none of the parent's workers: let it start its own pool. */
static void forget_pool_in_child(void) {
    atomic_store(&the_pool, NULL);
    pthread_mutex_init(&create_mutex, NULL);
}

static pool *get_pool(void) {
    pool *p = atomic_load_explicit(&the_pool, memory_order_acquire);
    if (p != NULL) {
        return p;
    }
    int workers = ge_threadpool_size() - 1;
    if (workers < 1) {
        return NULL;
    }
    pthread_mutex_lock(&create_mutex);
    p = atomic_load_explicit(&the_pool, memory_order_acquire);
    if (p == NULL) {
        static int atfork_registered;
        if (!atfork_registered) {
            pthread_atfork(NULL, NULL, forget_pool_in_child);
            atfork_registered = 1;
        }
        p = start_pool(workers);
        atomic_store_explicit(&the_pool, p, memory_order_release);
    }
    pthread_mutex_unlock(&create_mutex);
    return p;
}

static _Thread_local int serial_here;

int ge_threadpool_serial(int serial) {
    int previous = serial_here;
    serial_here = serial;
    return previous;
}

void ge_parallel_for(ge_context *ctx, int64_t n, int64_t grain, ge_range_fn fn, void *arg) {
    (void)ctx;
    if (n <= 0) {
        return;
    }
    if (grain < 1) {
        grain = 1;
    }
    if (n <= grain || serial_here) {
        fn(arg, 0, n);  /* small loops: no pool, no synchronization */
        return;
    }
    pool *p = get_pool();
    if (p == NULL || p->n_workers == 0 || atomic_flag_test_and_set(&p->busy)) {
        fn(arg, 0, n);
        return;
    }

    int64_t threads = (int64_t)p->n_workers + 1;
    int64_t n_chunks = (n - 1) / grain + 1;
    if (n_chunks > threads * CHUNKS_PER_THREAD) {
        n_chunks = threads * CHUNKS_PER_THREAD;
    }
    int64_t chunk = (n - 1) / n_chunks + 1;
    n_chunks = (n - 1) / chunk + 1;
    job work = {fn, arg, n, chunk, (uint32_t)n_chunks};

    pthread_mutex_lock(&p->mutex);
    uint32_t generation = ++p->generation;
    p->current = work;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint64_t)generation << 32, memory_order_release);
    /* Wake only as many workers as there are chunks beyond the caller's first. */
    int64_t helpers = n_chunks - 1 < p->n_workers ? n_chunks - 1 : p->n_workers;
    for (int64_t i = 0; i < helpers; i++) {
        pthread_cond_signal(&p->wake);
    }
    pthread_mutex_unlock(&p->mutex);

    run_chunks(p, generation, &work);

    if (!spin_for_done(p, work.n_chunks)) {
        pthread_mutex_lock(&p->mutex);
        while (atomic_load_explicit(&p->done, memory_order_acquire) < work.n_chunks) {
            pthread_cond_wait(&p->finished, &p->mutex);
        }
        pthread_mutex_unlock(&p->mutex);
    }
    atomic_flag_clear(&p->busy);
}
