/*
 * The executor proper, in plain C: a validated plan and the loop that runs it.
 *
 * A ge_plan is the C form of ge_hub.plan.Plan (built by module.c from Python data):
 * tensor specs saying where each tensor lives, steps naming a kernel and their tensors,
 * the arena size and the constants' memory. ge_plan_validate() checks all of it once,
 * so that the run loop trusts it and does nothing per step but call the kernel.
 *
 * Every step's tensor descriptors (ge_tensor) sit side by side in one "slot" array, the
 * step's inputs then its outputs, so a kernel gets pointers into that array as is. A
 * ge_run owns an arena and a copy of the slots already pointing into it and at the
 * constants; per run only the slots of graph inputs and outputs are patched. Runs are
 * pooled, one per concurrent run of the plan.
 */
#ifndef GE_HUB_EXECUTOR_H
#define GE_HUB_EXECUTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "ge_hub/kernel.h"

/* Where a tensor lives; the numbering is ge_hub.executor's STORAGE_CODES. */
enum { GE_STORAGE_ARENA = 0, GE_STORAGE_INPUT = 1, GE_STORAGE_OUTPUT = 2,
       GE_STORAGE_CONSTANT = 3, GE_NUM_STORAGES = 4 };

typedef struct {
    int32_t dtype;
    int32_t ndim;
    int64_t shape[GE_MAX_RANK];
    int32_t storage;
    int32_t index;    /* which input / output / constant */
    int64_t offset;   /* bytes into the arena or that buffer */
    /* derived by ge_plan_validate */
    int64_t numel;
    int64_t nbytes;
} ge_tensor_spec;

typedef struct {
    ge_kernel_fn fn;       /* NULL for a Python step */
    int32_t py_index;      /* the Python callable's index, for a Python step */
    int32_t n_inputs;
    int32_t n_outputs;
    int32_t *tensors;      /* n_inputs + n_outputs tensor indices; -1: omitted input */
    void *attrs;           /* owned copy of the attribute blob (never NULL) */
    size_t attrs_size;
    int64_t scratch_offset;
    int64_t scratch_bytes;
    char *node;            /* owned, for error messages */
    char *op;
    int32_t first_slot;    /* derived: where its descriptors start */
    int32_t stream;        /* the stream it runs on (0 unless ge_plan_set_streams) */
    int32_t threads;       /* 0: the whole pool, runs alone; 1: its calling thread only */
    /* derived by ge_plan_set_streams: its waited / recorded events in plan->event_list */
    int32_t wait_begin, wait_end, record_begin, record_end;
} ge_step_spec;

/* A maximal run of consecutive steps [begin, end) of threads 1 on several streams: the
 * executor runs it with one lane (thread) per stream; ranges[2 * stream] and
 * ranges[2 * stream + 1] bound the stream's steps in plan->stream_steps. */
typedef struct {
    int32_t begin, end;
    int32_t n_streams;     /* streams with steps in it */
    int32_t *ranges;
} ge_segment;

typedef struct {
    int32_t slot;
    int32_t storage;       /* GE_STORAGE_INPUT or GE_STORAGE_OUTPUT */
    int32_t index;
    int64_t offset;
} ge_patch;

typedef struct ge_plan {
    int32_t n_tensors;
    ge_tensor_spec *tensors;
    int32_t n_steps;
    ge_step_spec *steps;
    int64_t arena_bytes;
    int32_t n_inputs, n_outputs, n_constants, n_python;
    int64_t *input_nbytes;     /* exact byte size of each graph input buffer */
    int64_t *output_nbytes;
    int64_t *constant_nbytes;
    const void **constant_data;
    /* derived by ge_plan_validate */
    int32_t *input_alignment;  /* the alignment each buffer needs (largest itemsize) */
    int32_t *output_alignment;
    int32_t n_slots;
    int32_t *slot_tensor;
    int32_t n_patches;
    ge_patch *patches;
    ge_free_list runs;         /* idle ge_runs, one per past concurrent run */
    _Atomic int64_t runs_created;
    /* streams and events (ge_plan_set_streams); one stream and no events by default */
    int32_t n_streams;
    int32_t n_events;
    int32_t *event_list;       /* per step: its waited events, then its recorded ones */
    int32_t *stream_steps;     /* the steps of stream 0 in order, then stream 1's, ... */
    int32_t n_segments;
    ge_segment *segments;
} ge_plan;

struct ge_run;

/*
 * The optional per-step hook of a run (profiling and dumps). Contract, for every loop
 * that runs a plan's steps (the sequential loop here, stream loops later):
 *  - run->trace is NULL unless the caller set it before ge_plan_run (and clears it after);
 *    when NULL, the cost per step is one predictable branch and no clock read.
 *  - records, when not NULL, has plan->n_steps entries; the thread that runs step s writes
 *    records[s] (start/end: CLOCK_MONOTONIC ns around the kernel call alone; lane: 0 for
 *    the thread that called ge_plan_run, else the stream or worker lane the step ran on).
 *    A step that did not run keeps what the caller put there.
 *  - after_step, when not NULL, is called once per step right after its kernel succeeded,
 *    on the thread that ran it, before any step that depends on it starts (so its outputs
 *    are as the step wrote them, even when the planner lets a later step reuse or alias
 *    that memory); a non-zero return fails the run at that step like a failing kernel.
 */
typedef struct {
    int64_t start_ns;
    int64_t end_ns;
    int64_t lane;
} ge_step_record;

typedef int (*ge_step_observer_fn)(void *user, struct ge_run *run, int32_t step);

typedef struct {
    ge_step_record *records;
    ge_step_observer_fn after_step;
    void *user;
} ge_run_trace;

/* CLOCK_MONOTONIC in nanoseconds, the clock of ge_step_record. */
int64_t ge_now_ns(void);

typedef struct ge_run {
    ge_free_item link;         /* first: lets the run sit in plan->runs */
    unsigned char *arena;
    ge_tensor *slots;
    ge_context ctx;
    const ge_run_trace *trace; /* NULL: no per-step hook (see ge_run_trace) */
    atomic_int error_set;
    char error[1024];
    /* streams: the state of the concurrent segment being run (see executor.c) */
    int32_t n_lanes;           /* contexts in `lanes`: min(streams, pool size) */
    ge_context *lanes;
    uint64_t generation;       /* bumped per ge_plan_run; an event holds the run's value */
    _Atomic uint64_t *events;
    _Atomic int32_t *cursor;   /* per stream: next step, an index into plan->stream_steps */
    atomic_int *claimed;       /* per stream: 1 while a lane runs its steps */
    _Atomic int32_t remaining; /* steps of the segment not yet run */
    _Atomic int32_t failed;    /* the first failed step, or -1 */
    _Atomic uint32_t progress; /* bumped after each step; lanes with nothing to run wait */
    atomic_int sleepers;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
} ge_run;

/* A zeroed plan with room for these many entries (NULL when out of memory); the caller
 * fills the specs, then calls ge_plan_validate. */
ge_plan *ge_plan_new(int32_t n_tensors, int32_t n_steps, int32_t n_inputs, int32_t n_outputs,
                     int32_t n_constants);
void ge_plan_free(ge_plan *plan);

/* The attribute blob of a step without attributes (shared; ge_plan_free knows it). */
void *ge_empty_attrs(void);

/* Checks every index, size, offset and alignment and derives the rest; 0 when the plan is
 * sound, else -1 with a message naming the offending tensor or step in `error`. */
int ge_plan_validate(ge_plan *plan, char *error, size_t error_size);

/* A run ready for use (from the pool, or new; NULL when out of memory), and back. */
ge_run *ge_run_acquire(ge_plan *plan);
void ge_run_release(ge_plan *plan, ge_run *run);
/* Runs (each with its arena) made so far: the most that were ever in flight at once. */
int64_t ge_plan_runs_created(ge_plan *plan);

/*
 * Streams and events, set once after ge_plan_validate and before the first run: step s
 * runs on streams[s] with threads[s] (0 or 1) threads; event e makes step wait[e] start
 * after step signal[e] finished (signal[e] < wait[e]). Checks every value and returns
 * -1 with a message in `error` when one is out of range. A step of threads 0 and every
 * Python step run alone (on the calling thread, every earlier step done, no later one
 * started); consecutive steps of threads 1 on several streams run concurrently, one lane
 * per stream, each waiting for its events, the lanes taken from the thread pool so that
 * the threads never exceed its size (their kernels' own loops then run inline).
 */
int ge_plan_set_streams(ge_plan *plan, const int32_t *streams, const int32_t *threads,
                        int32_t n_events, const int32_t *signal, const int32_t *wait,
                        char *error, size_t error_size);

/* Runs a Python step (the binding supplies it); returns 0 on success. */
typedef int (*ge_python_step_fn)(void *user, ge_run *run, int32_t step);

/*
 * Runs every step in order, reading graph inputs and writing graph outputs in the given
 * buffers (already checked for size and alignment). Returns -1 on success, or the index
 * of the step that failed, with its message in run->error.
 */
int32_t ge_plan_run(const ge_plan *plan, ge_run *run, void *const *inputs, void *const *outputs,
                    ge_python_step_fn python_step, void *user);

#endif /* GE_HUB_EXECUTOR_H */
