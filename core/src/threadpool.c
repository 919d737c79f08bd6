/*
 * A small pthread pool for ge_parallel_for (see threadpool.h).
 *
 * A loop is cut into at most 4 chunks per thread (enough to even out uneven chunks
 * without paying for many hand-offs), and each thread of the pool (the caller is thread 0,
 * worker i is thread i) has a home range of them: the same share of every loop. A thread
 * claims its own range front to back, and only then takes chunks left in the others'. On
 * a 2-vCPU virtual machine whose two vCPUs the host sometimes placed on different core
 * complexes (a cache line's round trip between them went from about 60 ns to 330 ns, for
 * seconds at a time), every shared line and every value one core wrote and the other read
 * cost five times as much, and the tiny detector at 2 threads ran no faster than on one
 * (1.70 ms per image against 0.99 ms in the near placement; ONNX Runtime, which keeps
 * loops on preferred workers, 0.94 against 0.86). Home ranges keep the two cores' claims
 * on separate cache lines, and give a layer's rows to the core that wrote them one layer
 * before, where the kernels cut their loops alike.
 *
 * Claims go through one atomic word per thread that holds the job's generation in its
 * high half and the claimed count in its low half, so a worker that wakes late, after its
 * job finished and another began, can never claim a chunk of a job it did not copy. Each
 * thread adds the chunks it ran to a shared count once, when it finds none left; the
 * caller runs its own chunks and then waits only until that count is complete; it never
 * waits for workers that did not take part.
 *
 * The hand-off takes no lock. The caller publishes a job under a sequence lock, which
 * spinning workers read the moment it is complete, and touches the mutex only when a
 * worker has gone to sleep; the thread that finishes the last chunk signals only when the
 * caller has gone to sleep. Two things made a small loop slower on two threads than on
 * one, measured on a 2-vCPU virtual machine:
 *
 * - A spinning worker that saw a new job used to block on the mutex the caller still
 *   held, and the futex wake-up that followed came after the caller had run every chunk.
 * - The kernel may place a woken thread on its waker's CPU (it did for most wake-ups
 *   there, the other vCPU being idle), so a worker woken by the caller ran on the
 *   caller's CPU: it preempted the caller and then spun there, waiting for a job that the caller could
 *   not publish until the spin ended. A worker that wakes up beside the caller now moves
 *   itself off that CPU (see leave_callers_cpu).
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
#include <time.h>
#include <unistd.h>

#define CHUNKS_PER_THREAD 4
#define MAX_THREADS 256

/* One thread's home range of the current job: generation << 32 | chunks of the range
 * claimed so far (by it or by others), alone in its cache line. */
typedef struct {
    _Alignas(64) _Atomic uint64_t claimed;
} home_range;

/* One parallel loop, as the caller publishes it and a worker copies it. */
typedef struct {
    ge_range_fn fn;
    void *arg;
    int64_t n;
    int64_t chunk;     /* items per chunk */
    uint32_t n_chunks;
} job;

typedef struct {
    /* The published job, written by the caller under the sequence lock `sequence` (odd
     * while being written; the job's generation is sequence / 2). The fields are atomics,
     * accessed relaxed, because a late worker may read them while the next job is being
     * written; the sequence then tells it to read again. */
    _Atomic uint32_t sequence;
    _Atomic(ge_range_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n;
    _Atomic int64_t chunk;
    _Atomic uint32_t n_chunks;

    home_range *ranges;           /* one per thread: [0] the caller's, [i] worker i's */
    _Atomic uint32_t done;        /* chunks of the current job finished */
    _Atomic int caller_cpu;       /* where the caller published the current job */
    _Atomic int sleeping_workers; /* workers in (or about to enter) cond_wait on `wake` */
    _Atomic int caller_sleeping;  /* 1 while the caller waits on `finished` */
    pthread_mutex_t mutex;        /* only around the two condition variables */
    pthread_cond_t wake;          /* sleeping workers wait here for a new sequence */
    pthread_cond_t finished;      /* a sleeping caller waits here for the last chunk */
    atomic_flag busy;             /* held by the parallel_for that owns the pool */
    int n_workers;
    int threads;                  /* workers asked for + 1: the home ranges */
    int may_move;                 /* at most one thread per CPU: leave_callers_cpu may act */
    int64_t spin_ns;              /* how long a thread polls before it sleeps */
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

/* The CPU this thread runs on, or -1 where that cannot be asked. */
static int current_cpu(void) {
#if defined(__linux__) && defined(CPU_SET)
    return sched_getcpu();
#else
    return -1;
#endif
}

/* Called by a worker just woken by the caller: when the kernel put it on the caller's
 * CPU, it would run there in turns with the caller, so it takes that CPU out of its own
 * affinity, which moves it at once. Not when the pool has more threads than CPUs: there
 * some threads share a CPU whatever they do. Returns the CPU taken out, or -1. */
static int leave_callers_cpu(pool *p) {
#if defined(__linux__) && defined(CPU_SET)
    int caller = atomic_load_explicit(&p->caller_cpu, memory_order_relaxed);
    cpu_set_t cpus;
    if (!p->may_move || caller < 0 || caller >= CPU_SETSIZE || current_cpu() != caller
        || sched_getaffinity(0, sizeof cpus, &cpus) != 0) {
        return -1;
    }
    CPU_CLR(caller, &cpus);
    if (CPU_COUNT(&cpus) > 0 && sched_setaffinity(0, sizeof cpus, &cpus) == 0) {
        return caller;
    }
#else
    (void)p;
#endif
    return -1;
}

/* Gives back the CPU leave_callers_cpu took out (the rest of the affinity as it is now,
 * should someone else have changed it), before the worker sleeps: the caller may run
 * elsewhere by the time it is woken again. */
static void return_to_cpu(int cpu) {
#if defined(__linux__) && defined(CPU_SET)
    cpu_set_t cpus;
    if (cpu >= 0 && sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
        CPU_SET(cpu, &cpus);
        sched_setaffinity(0, sizeof cpus, &cpus);
    }
#else
    (void)cpu;
#endif
}

static void publish(pool *p, const job *work, uint32_t sequence) {
    atomic_store_explicit(&p->sequence, sequence - 1, memory_order_relaxed);  /* odd */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, work->fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, work->arg, memory_order_relaxed);
    atomic_store_explicit(&p->n, work->n, memory_order_relaxed);
    atomic_store_explicit(&p->chunk, work->chunk, memory_order_relaxed);
    atomic_store_explicit(&p->n_chunks, work->n_chunks, memory_order_relaxed);
    atomic_store_explicit(&p->caller_cpu, current_cpu(), memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    for (int t = 0; t < p->threads; t++) {
        atomic_store_explicit(&p->ranges[t].claimed, (uint64_t)(sequence / 2) << 32,
                              memory_order_relaxed);
    }
    atomic_store_explicit(&p->sequence, sequence, memory_order_release);
}

/* Copies the published job when it is complete and newer than `seen`; returns its
 * sequence, or `seen` when there is nothing new to copy (yet). */
static uint32_t read_job(pool *p, uint32_t seen, job *work) {
    uint32_t before = atomic_load_explicit(&p->sequence, memory_order_acquire);
    if (before == seen || (before & 1u)) {
        return seen;
    }
    work->fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    work->arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    work->n = atomic_load_explicit(&p->n, memory_order_relaxed);
    work->chunk = atomic_load_explicit(&p->chunk, memory_order_relaxed);
    work->n_chunks = atomic_load_explicit(&p->n_chunks, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint32_t after = atomic_load_explicit(&p->sequence, memory_order_relaxed);
    return after == before ? before : seen;  /* rewritten meanwhile: try again */
}

/* Thread `t`'s home range of a job cut into n_chunks: [range_begin(t), range_begin(t + 1)),
 * the earlier threads taking the larger shares. */
static uint32_t range_begin(uint32_t n_chunks, int threads, int t) {
    return (uint32_t)(((uint64_t)n_chunks * (uint64_t)t + (uint64_t)threads - 1)
                      / (uint64_t)threads);
}

/* Claims the next chunk of thread `t`'s home range for job `generation`; returns it, or
 * -1 when the range has none left (or belongs to a newer job). */
static int64_t claim(pool *p, int t, uint32_t generation, const job *work) {
    _Atomic uint64_t *word = &p->ranges[t].claimed;
    const uint32_t begin = range_begin(work->n_chunks, p->threads, t);
    const uint32_t size = range_begin(work->n_chunks, p->threads, t + 1) - begin;
    uint64_t claimed = atomic_load_explicit(word, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(claimed >> 32) != generation || (uint32_t)claimed >= size) {
            return -1;
        }
        if (atomic_compare_exchange_weak_explicit(word, &claimed, claimed + 1,
                                                  memory_order_acq_rel,
                                                  memory_order_acquire)) {
            return (int64_t)begin + (uint32_t)claimed;
        }
    }
}

/* Runs chunks of the job as thread `t`: its own range first, then what is left of the
 * others' (nearest first); then adds what it ran to the job's count of finished chunks. */
static void run_chunks(pool *p, int t, uint32_t generation, const job *work) {
    uint32_t ran = 0;
    for (int step = 0; step < p->threads; step++) {
        const int owner = (t + step) % p->threads;
        int64_t chunk;
        while ((chunk = claim(p, owner, generation, work)) >= 0) {
            int64_t begin = chunk * work->chunk;
            int64_t end = begin + work->chunk < work->n ? begin + work->chunk : work->n;
            work->fn(work->arg, begin, end);
            ran++;
        }
    }
    if (ran == 0) {
        return;
    }
    /* seq_cst, against the caller's store to caller_sleeping: one of the two sees the
     * other, so the last chunk never goes unsignalled. */
    uint32_t finished = atomic_fetch_add(&p->done, ran) + ran;
    if (finished == work->n_chunks && atomic_load(&p->caller_sleeping)) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_signal(&p->finished);
        pthread_mutex_unlock(&p->mutex);
    }
}

/* How long a thread polls for the next job (or for the last chunk) before it sleeps on a
 * condition variable, in microseconds: GE_HUB_SPIN_US, else DEFAULT_SPIN_US. A kernel runs
 * several parallel loops back to back, and a model's runs follow each other with a little
 * single-threaded work between them (Python, a segment's small steps). A sleeping worker
 * costs a futex wake-up at the next loop, and on a virtual machine, whose idle vCPU the
 * host deschedules, that wake-up took about 0.1 ms: the tiny detector at 2 threads ran
 * 0.85-0.90 ms per image in stretches where its worker slept every fourth run, against
 * 0.98-1.02 ms where it slept every run. So the spin is measured in time, long enough to
 * bridge one run to the next; an idle pool still sleeps after it (OpenMP runtimes spin
 * 200 ms by default). 0 sleeps at once. */
#define DEFAULT_SPIN_US 1000
#define MAX_SPIN_US 1000000
/* Pause rounds between two reads of the clock (each a few nanoseconds to tens). */
#define ROUNDS_PER_CLOCK 64

static int64_t spin_ns_configured(void) {
    const char *text = getenv("GE_HUB_SPIN_US");
    long us = DEFAULT_SPIN_US;
    if (text != NULL && *text != '\0') {
        char *end = NULL;
        long wanted = strtol(text, &end, 10);
        if (end != NULL && *end == '\0' && wanted >= 0) {  /* else the default */
            us = wanted > MAX_SPIN_US ? MAX_SPIN_US : wanted;
        }
    }
    return (int64_t)us * 1000;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A spin of at most `spin_ns`: call spin_more until it says stop. */
typedef struct {
    int64_t deadline;
    uint32_t rounds;
} spin;

static spin spin_start(int64_t spin_ns) {
    spin s = {spin_ns > 0 ? now_ns() + spin_ns : 0, 0};
    return s;
}

static int spin_more(spin *s) {
    if (s->deadline == 0) {
        return 0;
    }
    cpu_relax();
    if (++s->rounds % ROUNDS_PER_CLOCK == 0 && now_ns() >= s->deadline) {
        return 0;
    }
    return 1;
}

/* The next job after `seen`: polled for the pool's spin, then waited for asleep. */
static uint32_t next_job(pool *p, uint32_t seen, job *work, int *moved_off) {
    spin s = spin_start(p->spin_ns);
    do {
        uint32_t sequence = read_job(p, seen, work);
        if (sequence != seen) {
            return sequence;
        }
    } while (spin_more(&s));
    return_to_cpu(*moved_off);
    pthread_mutex_lock(&p->mutex);
    /* seq_cst, against the caller's publish-then-check: either it sees this sleeper and
     * signals, or the load below sees its new sequence. */
    atomic_fetch_add(&p->sleeping_workers, 1);
    while (atomic_load(&p->sequence) == seen) {
        pthread_cond_wait(&p->wake, &p->mutex);
    }
    atomic_fetch_sub(&p->sleeping_workers, 1);
    pthread_mutex_unlock(&p->mutex);
    *moved_off = leave_callers_cpu(p);
    uint32_t sequence;
    while ((sequence = read_job(p, seen, work)) == seen) {
        cpu_relax();  /* odd: the caller is still writing it */
    }
    return sequence;
}

typedef struct {
    pool *p;
    int index;  /* its home range: 1..workers */
} worker_start;

static void *worker_main(void *arg) {
    worker_start start = *(worker_start *)arg;
    free(arg);
    pool *p = start.p;
    int moved_off = -1;  /* the CPU this worker took out of its affinity, if any */
    /* Sequence 0 is the pool's state at creation: a worker that starts late still takes
     * part in the first job rather than waiting for the second. */
    uint32_t seen = 0;
    for (;;) {
        job work;
        seen = next_job(p, seen, &work, &moved_off);
        run_chunks(p, start.index, seen / 2, &work);
    }
    return NULL;
}

/* Returns once all `n_chunks` chunks are done: polled for the pool's spin, then asleep. */
static void wait_for_chunks(pool *p, uint32_t n_chunks) {
    spin s = spin_start(p->spin_ns);
    do {
        if (atomic_load_explicit(&p->done, memory_order_acquire) >= n_chunks) {
            return;
        }
    } while (spin_more(&s));
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->caller_sleeping, 1);
    while (atomic_load(&p->done) < n_chunks) {
        pthread_cond_wait(&p->finished, &p->mutex);
    }
    atomic_store(&p->caller_sleeping, 0);
    pthread_mutex_unlock(&p->mutex);
}

static pool *start_pool(int workers) {
    pool *p = calloc(1, sizeof *p);
    if (p == NULL) {
        return NULL;
    }
    /* Every range from the start: a worker that fails to start leaves its range to
     * the others. */
    p->threads = workers + 1;
    p->ranges = aligned_alloc(_Alignof(home_range), sizeof(home_range) * (size_t)p->threads);
    if (p->ranges == NULL) {
        free(p);
        return NULL;
    }
    for (int t = 0; t < p->threads; t++) {
        atomic_init(&p->ranges[t].claimed, 0);
    }
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    atomic_flag_clear(&p->busy);
    p->may_move = workers + 1 <= cpus_available();
    p->spin_ns = spin_ns_configured();

    /* Workers run only kernel code: keep signals for the interpreter's threads. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < workers; i++) {
        pthread_t thread;
        worker_start *start = malloc(sizeof *start);
        if (start == NULL) {
            break;
        }
        start->p = p;
        start->index = i + 1;
        if (pthread_create(&thread, &attr, worker_main, start) != 0) {
            free(start);
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

/* ge_thread_workspace: the calling thread's area, also held under a key whose destructor
 * frees it when the thread exits. */
static pthread_key_t workspace_key;
static pthread_once_t workspace_once = PTHREAD_ONCE_INIT;
static int workspace_key_made;
static _Thread_local void *workspace;
static _Thread_local size_t workspace_bytes;

static void make_workspace_key(void) {
    workspace_key_made = pthread_key_create(&workspace_key, free) == 0;
}

void *ge_thread_workspace(size_t bytes) {
    if (bytes <= workspace_bytes) {
        return workspace;
    }
    pthread_once(&workspace_once, make_workspace_key);
    if (!workspace_key_made) {
        return NULL;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    void *grown = aligned_alloc(64, rounded);
    if (grown == NULL || pthread_setspecific(workspace_key, grown) != 0) {
        free(grown);
        return NULL;  /* the old area stays this thread's, under its key */
    }
    free(workspace);
    workspace = grown;
    workspace_bytes = rounded;
    return workspace;
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

    /* Only the thread holding `busy` writes the sequence: +2 per job, odd in between. */
    uint32_t sequence = atomic_load_explicit(&p->sequence, memory_order_relaxed) + 2;
    publish(p, &work, sequence);
    /* seq_cst, against a worker's sleeper count then sequence check (next_job). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&p->sleeping_workers) > 0) {
        /* Wake only as many workers as there are chunks beyond the caller's first. */
        int64_t helpers = n_chunks - 1 < p->n_workers ? n_chunks - 1 : p->n_workers;
        pthread_mutex_lock(&p->mutex);
        for (int64_t i = 0; i < helpers; i++) {
            pthread_cond_signal(&p->wake);
        }
        pthread_mutex_unlock(&p->mutex);
    }

    run_chunks(p, 0, sequence / 2, &work);
    wait_for_chunks(p, work.n_chunks);
    atomic_flag_clear(&p->busy);
}
