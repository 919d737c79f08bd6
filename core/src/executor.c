/* Plan validation, run states and the run loop (see executor.h). */
#include "executor.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "threadpool.h"

/* What an omitted input's descriptor points at: ndim 0, numel 0, data NULL. */
static const int64_t no_shape[1] = {0};

/* Given to a kernel whose step has no attributes, so `attrs` is never NULL. */
static const int64_t no_attrs[1] = {0};

ge_plan *ge_plan_new(int32_t n_tensors, int32_t n_steps, int32_t n_inputs, int32_t n_outputs,
                     int32_t n_constants) {
    ge_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL) {
        return NULL;
    }
    plan->n_tensors = n_tensors;
    plan->n_steps = n_steps;
    plan->n_inputs = n_inputs;
    plan->n_outputs = n_outputs;
    plan->n_constants = n_constants;
    plan->n_streams = 1;
    ge_free_list_init(&plan->runs);
    /* calloc(0) may return NULL; ask for one element so NULL always means no memory. */
    plan->tensors = calloc((size_t)n_tensors + 1, sizeof *plan->tensors);
    plan->steps = calloc((size_t)n_steps + 1, sizeof *plan->steps);
    plan->input_nbytes = calloc((size_t)n_inputs + 1, sizeof(int64_t));
    plan->output_nbytes = calloc((size_t)n_outputs + 1, sizeof(int64_t));
    plan->constant_nbytes = calloc((size_t)n_constants + 1, sizeof(int64_t));
    plan->constant_data = calloc((size_t)n_constants + 1, sizeof(void *));
    plan->input_alignment = calloc((size_t)n_inputs + 1, sizeof(int32_t));
    plan->output_alignment = calloc((size_t)n_outputs + 1, sizeof(int32_t));
    if (!plan->tensors || !plan->steps || !plan->input_nbytes || !plan->output_nbytes
        || !plan->constant_nbytes || !plan->constant_data || !plan->input_alignment
        || !plan->output_alignment) {
        ge_plan_free(plan);
        return NULL;
    }
    return plan;
}

static void run_free(ge_run *run) {
    ge_arena_free(run->arena);
    free(run->slots);
    free(run->lanes);
    free(run->events);
    free(run->cursor);
    free(run->claimed);
    pthread_mutex_destroy(&run->mutex);
    pthread_cond_destroy(&run->wake);
    free(run);
}

void ge_plan_free(ge_plan *plan) {
    if (plan == NULL) {
        return;
    }
    ge_free_item *item = ge_free_list_drain(&plan->runs);
    while (item != NULL) {
        ge_free_item *next = item->next;
        run_free((ge_run *)item);
        item = next;
    }
    ge_free_list_destroy(&plan->runs);
    for (int32_t s = 0; s < plan->n_steps; s++) {
        ge_step_spec *step = &plan->steps[s];
        free(step->tensors);
        if (step->attrs != (void *)no_attrs) {
            free(step->attrs);
        }
        free(step->node);
        free(step->op);
    }
    free(plan->tensors);
    free(plan->steps);
    free(plan->input_nbytes);
    free(plan->output_nbytes);
    free(plan->constant_nbytes);
    free(plan->constant_data);
    free(plan->input_alignment);
    free(plan->output_alignment);
    free(plan->slot_tensor);
    free(plan->patches);
    free(plan->event_list);
    free(plan->stream_steps);
    for (int32_t g = 0; g < plan->n_segments; g++) {
        free(plan->segments[g].ranges);
    }
    free(plan->segments);
    free(plan);
}

/* -- validation ---------------------------------------------------------------------- */

static const char *const storage_names[GE_NUM_STORAGES] = {"arena", "input", "output",
                                                           "constant"};

static int fail(char *error, size_t size, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, size, fmt, args);
    va_end(args);
    return -1;
}

static int64_t storage_count(const ge_plan *plan, int32_t storage) {
    switch (storage) {
    case GE_STORAGE_INPUT: return plan->n_inputs;
    case GE_STORAGE_OUTPUT: return plan->n_outputs;
    case GE_STORAGE_CONSTANT: return plan->n_constants;
    default: return 1;
    }
}

static int64_t storage_capacity(const ge_plan *plan, int32_t storage, int32_t index) {
    switch (storage) {
    case GE_STORAGE_INPUT: return plan->input_nbytes[index];
    case GE_STORAGE_OUTPUT: return plan->output_nbytes[index];
    case GE_STORAGE_CONSTANT: return plan->constant_nbytes[index];
    default: return plan->arena_bytes;
    }
}

static int validate_tensor(ge_plan *plan, int32_t t, char *error, size_t size) {
    ge_tensor_spec *spec = &plan->tensors[t];
    size_t itemsize = ge_dtype_itemsize(spec->dtype);
    if (itemsize == 0) {
        return fail(error, size, "tensor %d: unknown dtype code %d (expected 0..%d)", t,
                    spec->dtype, GE_NUM_DTYPES - 1);
    }
    if (spec->ndim < 0 || spec->ndim > GE_MAX_RANK) {
        return fail(error, size, "tensor %d: rank %d is outside 0..%d", t, spec->ndim,
                    GE_MAX_RANK);
    }
    int64_t numel = 1;
    for (int32_t d = 0; d < spec->ndim; d++) {
        int64_t dim = spec->shape[d];
        if (dim < 0) {
            return fail(error, size, "tensor %d: dimension %d is negative (%lld)", t, d,
                        (long long)dim);
        }
        if (dim != 0 && numel > INT64_MAX / (int64_t)itemsize / dim) {
            return fail(error, size, "tensor %d: its size overflows 64 bits", t);
        }
        numel *= dim;
    }
    spec->numel = numel;
    spec->nbytes = numel * (int64_t)itemsize;
    if (spec->storage < 0 || spec->storage >= GE_NUM_STORAGES) {
        return fail(error, size, "tensor %d: unknown storage code %d (expected 0..%d)", t,
                    spec->storage, GE_NUM_STORAGES - 1);
    }
    const char *where = storage_names[spec->storage];
    if (spec->storage == GE_STORAGE_ARENA) {
        spec->index = 0;
    } else if (spec->index < 0 || spec->index >= storage_count(plan, spec->storage)) {
        return fail(error, size, "tensor %d: %s index %d is out of range (%lld %ss)", t, where,
                    spec->index, (long long)storage_count(plan, spec->storage), where);
    }
    if (spec->offset < 0 || spec->offset % (int64_t)itemsize != 0) {
        return fail(error, size, "tensor %d: offset %lld is not a non-negative multiple of "
                    "its itemsize %zu", t, (long long)spec->offset, itemsize);
    }
    int64_t capacity = storage_capacity(plan, spec->storage, spec->index);
    if (spec->offset > capacity || spec->nbytes > capacity - spec->offset) {
        return fail(error, size, "tensor %d: bytes [%lld, %lld) do not fit in %s %d "
                    "(%lld bytes)", t, (long long)spec->offset,
                    (long long)(spec->offset + spec->nbytes), where, spec->index,
                    (long long)capacity);
    }
    switch (spec->storage) {
    case GE_STORAGE_INPUT:
        if ((int32_t)itemsize > plan->input_alignment[spec->index]) {
            plan->input_alignment[spec->index] = (int32_t)itemsize;
        }
        break;
    case GE_STORAGE_OUTPUT:
        if ((int32_t)itemsize > plan->output_alignment[spec->index]) {
            plan->output_alignment[spec->index] = (int32_t)itemsize;
        }
        break;
    case GE_STORAGE_CONSTANT: {
        uintptr_t address = (uintptr_t)plan->constant_data[spec->index] + (uintptr_t)spec->offset;
        if (address % itemsize != 0) {
            return fail(error, size, "tensor %d: constant %d at offset %lld is not aligned "
                        "to its itemsize %zu", t, spec->index, (long long)spec->offset,
                        itemsize);
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

static int overlaps(int64_t a_begin, int64_t a_bytes, int64_t b_begin, int64_t b_bytes) {
    return a_bytes > 0 && b_bytes > 0 && a_begin < b_begin + b_bytes
           && b_begin < a_begin + a_bytes;
}

static int validate_step(ge_plan *plan, int32_t s, char *error, size_t size) {
    ge_step_spec *step = &plan->steps[s];
    const char *node = step->node ? step->node : "?";
    const char *op = step->op ? step->op : "?";
    if (step->n_inputs < 0 || step->n_outputs < 0) {
        return fail(error, size, "step %d (node '%s', op %s): negative tensor count", s, node,
                    op);
    }
    if (step->fn == NULL && (step->py_index < 0 || step->py_index >= plan->n_python)) {
        return fail(error, size, "step %d (node '%s', op %s): Python kernel index %d is out "
                    "of range (%d Python kernels)", s, node, op, step->py_index,
                    plan->n_python);
    }
    for (int32_t i = 0; i < step->n_inputs + step->n_outputs; i++) {
        int is_output = i >= step->n_inputs;
        int32_t position = is_output ? i - step->n_inputs : i;
        int32_t t = step->tensors[i];
        const char *role = is_output ? "output" : "input";
        if (t == -1 && !is_output) {
            continue;  /* an omitted optional input */
        }
        if (t < 0 || t >= plan->n_tensors) {
            return fail(error, size, "step %d (node '%s', op %s): %s %d names tensor %d, "
                        "out of range (%d tensors)", s, node, op, role, position, t,
                        plan->n_tensors);
        }
        const ge_tensor_spec *spec = &plan->tensors[t];
        if (is_output && (spec->storage == GE_STORAGE_INPUT
                          || spec->storage == GE_STORAGE_CONSTANT)) {
            return fail(error, size, "step %d (node '%s', op %s): output %d is tensor %d, "
                        "which lives in %s %d; a step may not write there", s, node, op,
                        position, t, storage_names[spec->storage], spec->index);
        }
    }
    if (step->scratch_offset < 0 || step->scratch_bytes < 0
        || step->scratch_offset > plan->arena_bytes
        || step->scratch_bytes > plan->arena_bytes - step->scratch_offset) {
        return fail(error, size, "step %d (node '%s', op %s): scratch [%lld, +%lld bytes) "
                    "does not fit in the arena (%lld bytes)", s, node, op,
                    (long long)step->scratch_offset, (long long)step->scratch_bytes,
                    (long long)plan->arena_bytes);
    }
    if (step->scratch_bytes > 0 && step->scratch_offset % GE_ARENA_ALIGNMENT != 0) {
        return fail(error, size, "step %d (node '%s', op %s): scratch offset %lld is not "
                    "%d-byte aligned", s, node, op, (long long)step->scratch_offset,
                    GE_ARENA_ALIGNMENT);
    }
    for (int32_t i = 0; i < step->n_inputs + step->n_outputs; i++) {
        int32_t t = step->tensors[i];
        if (t >= 0 && plan->tensors[t].storage == GE_STORAGE_ARENA
            && overlaps(step->scratch_offset, step->scratch_bytes, plan->tensors[t].offset,
                        plan->tensors[t].nbytes)) {
            return fail(error, size, "step %d (node '%s', op %s): its scratch overlaps its "
                        "own tensor %d", s, node, op, t);
        }
    }
    return 0;
}

int ge_plan_validate(ge_plan *plan, char *error, size_t size) {
    if (plan->arena_bytes < 0) {
        return fail(error, size, "arena size %lld is negative", (long long)plan->arena_bytes);
    }
    for (int32_t i = 0; i < plan->n_inputs; i++) {
        if (plan->input_nbytes[i] < 0) {
            return fail(error, size, "input %d: negative byte size", i);
        }
        plan->input_alignment[i] = 1;
    }
    for (int32_t i = 0; i < plan->n_outputs; i++) {
        if (plan->output_nbytes[i] < 0) {
            return fail(error, size, "output %d: negative byte size", i);
        }
        plan->output_alignment[i] = 1;
    }
    for (int32_t t = 0; t < plan->n_tensors; t++) {
        if (validate_tensor(plan, t, error, size) != 0) {
            return -1;
        }
    }
    int64_t n_slots = 0;
    for (int32_t s = 0; s < plan->n_steps; s++) {
        if (validate_step(plan, s, error, size) != 0) {
            return -1;
        }
        plan->steps[s].first_slot = (int32_t)n_slots;
        n_slots += plan->steps[s].n_inputs + plan->steps[s].n_outputs;
        if (n_slots > INT32_MAX) {
            return fail(error, size, "the plan has too many step tensors");
        }
    }

    plan->n_slots = (int32_t)n_slots;
    plan->slot_tensor = calloc((size_t)n_slots + 1, sizeof(int32_t));
    plan->patches = calloc((size_t)n_slots + 1, sizeof(ge_patch));
    if (plan->slot_tensor == NULL || plan->patches == NULL) {
        return fail(error, size, "out of memory");
    }
    for (int32_t s = 0; s < plan->n_steps; s++) {
        const ge_step_spec *step = &plan->steps[s];
        for (int32_t i = 0; i < step->n_inputs + step->n_outputs; i++) {
            int32_t slot = step->first_slot + i;
            int32_t t = step->tensors[i];
            plan->slot_tensor[slot] = t;
            if (t >= 0 && (plan->tensors[t].storage == GE_STORAGE_INPUT
                           || plan->tensors[t].storage == GE_STORAGE_OUTPUT)) {
                plan->patches[plan->n_patches++] = (ge_patch){
                    slot, plan->tensors[t].storage, plan->tensors[t].index,
                    plan->tensors[t].offset};
            }
        }
    }
    return 0;
}

/* -- runs ------------------------------------------------------------------------------ */

static int run_set_error(ge_context *ctx, const char *fmt, ...) {
    ge_run *run = ctx->executor_private;
    /* Chunks of a parallel loop may fail at once: the first message is kept. */
    if (atomic_exchange(&run->error_set, 1) == 0) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(run->error, sizeof run->error, fmt, args);
        va_end(args);
    }
    return -1;
}

static ge_run *run_new(const ge_plan *plan) {
    ge_run *run = calloc(1, sizeof *run);
    if (run == NULL) {
        return NULL;
    }
    pthread_mutex_init(&run->mutex, NULL);
    pthread_cond_init(&run->wake, NULL);
    int pool = ge_threadpool_size();
    run->n_lanes = plan->n_streams < pool ? plan->n_streams : pool;
    run->arena = ge_arena_alloc((size_t)plan->arena_bytes);
    run->slots = calloc((size_t)plan->n_slots + 1, sizeof(ge_tensor));
    run->lanes = calloc((size_t)run->n_lanes + 1, sizeof(ge_context));
    run->events = calloc((size_t)plan->n_events + 1, sizeof(_Atomic uint64_t));
    run->cursor = calloc((size_t)plan->n_streams + 1, sizeof(_Atomic int32_t));
    run->claimed = calloc((size_t)plan->n_streams + 1, sizeof(atomic_int));
    if (run->arena == NULL || run->slots == NULL || run->lanes == NULL || run->events == NULL
        || run->cursor == NULL || run->claimed == NULL) {
        run_free(run);
        return NULL;
    }
    for (int32_t e = 0; e < plan->n_events; e++) {
        atomic_init(&run->events[e], 0);
    }
    for (int32_t st = 0; st < plan->n_streams; st++) {
        atomic_init(&run->cursor[st], 0);
        atomic_init(&run->claimed[st], 0);
    }
    atomic_init(&run->remaining, 0);
    atomic_init(&run->failed, -1);
    atomic_init(&run->progress, 0);
    atomic_init(&run->sleepers, 0);
    for (int32_t slot = 0; slot < plan->n_slots; slot++) {
        ge_tensor *tensor = &run->slots[slot];
        int32_t t = plan->slot_tensor[slot];
        if (t < 0) {
            *tensor = (ge_tensor){NULL, GE_FLOAT32, 0, no_shape, 0};
            continue;
        }
        const ge_tensor_spec *spec = &plan->tensors[t];
        *tensor = (ge_tensor){NULL, spec->dtype, spec->ndim, spec->shape, spec->numel};
        if (spec->storage == GE_STORAGE_ARENA) {
            tensor->data = run->arena + spec->offset;
        } else if (spec->storage == GE_STORAGE_CONSTANT) {
            tensor->data = (unsigned char *)plan->constant_data[spec->index] + spec->offset;
        }  /* inputs and outputs: patched by every run */
    }
    run->ctx.parallel_for = ge_parallel_for;
    run->ctx.set_error = run_set_error;
    run->ctx.executor_private = run;
    for (int32_t lane = 0; lane < run->n_lanes; lane++) {
        run->lanes[lane] = run->ctx;
    }
    atomic_init(&run->error_set, 0);
    return run;
}

ge_run *ge_run_acquire(ge_plan *plan) {
    ge_run *run = (ge_run *)ge_free_list_take(&plan->runs);
    if (run == NULL) {
        run = run_new(plan);
        if (run != NULL) {
            atomic_fetch_add(&plan->runs_created, 1);
        }
    }
    return run;
}

int64_t ge_plan_runs_created(ge_plan *plan) {
    return atomic_load(&plan->runs_created);
}

void ge_run_release(ge_plan *plan, ge_run *run) {
    ge_free_list_give(&plan->runs, &run->link);
}

int64_t ge_now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* The per-step hook (see ge_run_trace): records the step, then lets the observer see it. */
static int trace_step(const ge_run_trace *trace, ge_run *run, int32_t s, int64_t start_ns,
                      int64_t lane, int status) {
    if (trace->records != NULL) {
        trace->records[s] = (ge_step_record){start_ns, ge_now_ns(), lane};
    }
    if (status == 0 && trace->after_step != NULL) {
        status = trace->after_step(trace->user, run, s);
    }
    return status;
}

/* -- streams ---------------------------------------------------------------------------- */

/* Whether step s may overlap others: threads 1 and a C kernel (a Python step needs the
 * calling thread, which holds the interpreter's thread state). */
static int overlaps_others(const ge_plan *plan, int32_t s) {
    return plan->steps[s].threads == 1 && plan->steps[s].fn != NULL;
}

int ge_plan_set_streams(ge_plan *plan, const int32_t *streams, const int32_t *threads,
                        int32_t n_events, const int32_t *signal, const int32_t *wait,
                        char *error, size_t size) {
    if (atomic_load(&plan->runs_created) != 0 || plan->event_list != NULL) {
        return fail(error, size, "streams are set once, before the plan first runs");
    }
    int32_t n = plan->n_steps;
    if (n_events < 0) {
        return fail(error, size, "negative event count %d", n_events);
    }
    int32_t n_streams = 1;
    for (int32_t s = 0; s < n; s++) {
        const char *node = plan->steps[s].node ? plan->steps[s].node : "?";
        if (streams[s] < 0 || streams[s] >= (n > 0 ? n : 1)) {
            return fail(error, size, "step %d (node '%s'): stream %d is out of range "
                        "(0..%d)", s, node, streams[s], n - 1);
        }
        if (threads[s] != 0 && threads[s] != 1) {
            return fail(error, size, "step %d (node '%s'): threads %d is neither 0 (the "
                        "pool) nor 1 (its own thread)", s, node, threads[s]);
        }
        if (streams[s] + 1 > n_streams) {
            n_streams = streams[s] + 1;
        }
    }
    for (int32_t e = 0; e < n_events; e++) {
        if (signal[e] < 0 || wait[e] >= n || signal[e] >= wait[e]) {
            return fail(error, size, "event %d: step %d waits for step %d; both must be steps "
                        "(0..%d) and the signalling one earlier", e, wait[e], signal[e],
                        n - 1);
        }
    }
    int32_t *event_list = calloc(2 * (size_t)n_events + 1, sizeof(int32_t));
    int32_t *stream_steps = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *count = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *first = calloc((size_t)n_streams + 1, sizeof(int32_t));
    ge_segment *segments = calloc((size_t)n + 1, sizeof(ge_segment));
    if (!event_list || !stream_steps || !count || !first || !segments) {
        free(event_list);
        free(stream_steps);
        free(count);
        free(first);
        free(segments);
        return fail(error, size, "out of memory");
    }
    /* Events by waiting step then by signalling step (counting sort, stable). */
    for (int32_t e = 0; e < n_events; e++) {
        count[wait[e]]++;
    }
    int32_t at = 0;
    for (int32_t s = 0; s < n; s++) {
        plan->steps[s].stream = streams[s];
        plan->steps[s].threads = threads[s];
        plan->steps[s].wait_begin = plan->steps[s].wait_end = at;
        at += count[s];
        count[s] = 0;
    }
    for (int32_t e = 0; e < n_events; e++) {
        event_list[plan->steps[wait[e]].wait_end++] = e;
    }
    for (int32_t e = 0; e < n_events; e++) {
        count[signal[e]]++;
    }
    for (int32_t s = 0; s < n; s++) {
        plan->steps[s].record_begin = plan->steps[s].record_end = at;
        at += count[s];
    }
    for (int32_t e = 0; e < n_events; e++) {
        event_list[plan->steps[signal[e]].record_end++] = e;
    }
    /* Steps by stream, in plan order. */
    memset(count, 0, ((size_t)n + 1) * sizeof(int32_t));
    for (int32_t s = 0; s < n; s++) {
        count[streams[s]]++;
    }
    for (int32_t st = 0, total = 0; st < n_streams; st++) {
        first[st] = total;
        total += count[st];
        count[st] = 0;
    }
    int32_t *position = count;  /* reused: step -> its index in stream_steps */
    int32_t *filled = calloc((size_t)n_streams + 1, sizeof(int32_t));
    if (filled == NULL) {
        free(event_list);
        free(stream_steps);
        free(count);
        free(first);
        free(segments);
        return fail(error, size, "out of memory");
    }
    for (int32_t s = 0; s < n; s++) {
        position[s] = first[streams[s]] + filled[streams[s]]++;
        stream_steps[position[s]] = s;
    }
    /* Concurrent segments: maximal runs of steps that may overlap, on several streams. */
    int32_t n_segments = 0;
    int status = 0;
    for (int32_t s = 0; s < n && status == 0;) {
        if (!overlaps_others(plan, s)) {
            s++;
            continue;
        }
        int32_t e = s;
        int32_t distinct = 0;
        while (e < n && overlaps_others(plan, e)) {
            e++;
        }
        int32_t *ranges = calloc(2 * (size_t)n_streams + 1, sizeof(int32_t));
        if (ranges == NULL) {
            status = -1;
            break;
        }
        for (int32_t t = s; t < e; t++) {
            int32_t st = streams[t];
            if (ranges[2 * st + 1] == 0) {
                ranges[2 * st] = position[t];
                distinct++;
            }
            ranges[2 * st + 1] = position[t] + 1;
        }
        if (distinct > 1) {
            segments[n_segments++] = (ge_segment){s, e, distinct, ranges};
        } else {
            free(ranges);
        }
        s = e;
    }
    free(filled);
    free(count);
    free(first);
    if (status != 0) {
        for (int32_t g = 0; g < n_segments; g++) {
            free(segments[g].ranges);
        }
        free(segments);
        free(event_list);
        free(stream_steps);
        return fail(error, size, "out of memory");
    }
    plan->n_streams = n_streams;
    plan->n_events = n_events;
    plan->event_list = event_list;
    plan->stream_steps = stream_steps;
    plan->n_segments = n_segments;
    plan->segments = segments;
    return 0;
}

/* What one ge_plan_run call hands its lanes. */
typedef struct {
    const ge_plan *plan;
    ge_run *run;
    const ge_segment *segment;
    ge_python_step_fn python_step;
    void *user;
} lane_job;

/* Calls step s's kernel on ctx; a step of threads 1 keeps its parallel loops on this
 * thread. */
static inline int call_step(const ge_plan *plan, ge_run *run, ge_context *ctx, int32_t s,
                            ge_python_step_fn python_step, void *user) {
    const ge_step_spec *step = &plan->steps[s];
    ctx->scratch = step->scratch_bytes > 0 ? run->arena + step->scratch_offset : NULL;
    ctx->scratch_bytes = (size_t)step->scratch_bytes;
    int status;
    if (step->fn != NULL) {
        const ge_tensor *tensors = run->slots + step->first_slot;
        int serial = step->threads == 1 ? ge_threadpool_serial(1) : 0;
        status = step->fn(ctx, tensors, step->n_inputs, tensors + step->n_inputs,
                          step->n_outputs, step->attrs, step->attrs_size);
        if (step->threads == 1) {
            ge_threadpool_serial(serial);
        }
    } else {
        status = python_step(user, run, s);
    }
    return status;
}

/* The per-step hook's path (ge_run_trace), out of line: without a hook a step pays one
 * predictable branch, and no clock read or live start time around its kernel call. */
static __attribute__((noinline)) int call_step_traced(const ge_plan *plan, ge_run *run,
                                                      ge_context *ctx, int32_t s,
                                                      ge_python_step_fn python_step,
                                                      void *user) {
    int64_t start_ns = ge_now_ns();
    int status = call_step(plan, run, ctx, s, python_step, user);
    return trace_step(run->trace, run, s, start_ns, plan->steps[s].stream, status);
}

/* Runs step s on ctx (with the per-step hook when the run has one). */
static int run_step(const ge_plan *plan, ge_run *run, ge_context *ctx, int32_t s,
                    ge_python_step_fn python_step, void *user) {
    int status = __builtin_expect(run->trace != NULL, 0)
                     ? call_step_traced(plan, run, ctx, s, python_step, user)
                     : call_step(plan, run, ctx, s, python_step, user);
    if (status != 0 && atomic_exchange(&run->error_set, 1) == 0) {
        snprintf(run->error, sizeof run->error,
                 "the kernel returned %d without setting an error message", status);
    }
    return status;
}

static void bump_progress(ge_run *run) {
    atomic_fetch_add(&run->progress, 1);
    /* A lane that found nothing to run sleeps only after announcing itself in `sleepers`
     * and reading `progress` again (both sequentially consistent), so either it sees this
     * bump or this load sees it and wakes it under the mutex. */
    if (atomic_load(&run->sleepers) > 0) {
        pthread_mutex_lock(&run->mutex);
        pthread_cond_broadcast(&run->wake);
        pthread_mutex_unlock(&run->mutex);
    }
}

/* Polls this often before sleeping: the step a lane waits for is usually short. */
#define LANE_SPINS 2000

static void wait_for_progress(ge_run *run, uint32_t seen) {
    for (int i = 0; i < LANE_SPINS; i++) {
        if (atomic_load_explicit(&run->progress, memory_order_acquire) != seen) {
            return;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&run->mutex);
    atomic_fetch_add(&run->sleepers, 1);
    while (atomic_load(&run->progress) == seen) {
        pthread_cond_wait(&run->wake, &run->mutex);
    }
    atomic_fetch_sub(&run->sleepers, 1);
    pthread_mutex_unlock(&run->mutex);
}

static void record_events(const ge_plan *plan, ge_run *run, const ge_step_spec *step) {
    for (int32_t i = step->record_begin; i < step->record_end; i++) {
        atomic_store_explicit(&run->events[plan->event_list[i]], run->generation,
                              memory_order_release);
    }
}

static int events_recorded(const ge_plan *plan, const ge_run *run, const ge_step_spec *step) {
    for (int32_t i = step->wait_begin; i < step->wait_end; i++) {
        uint64_t seen = atomic_load_explicit(&run->events[plan->event_list[i]],
                                             memory_order_acquire);
        if (seen != run->generation) {
            return 0;
        }
    }
    return 1;
}

/*
 * One lane of a concurrent segment (a ge_parallel_for chunk; `lane` indexes its context).
 * Lanes take streams, not threads: a lane claims a stream whose next step's events are
 * recorded, runs its steps while they are ready, and gives the stream back when one is
 * not; a lane with nothing ready waits for any other step to finish. The earliest
 * unfinished step is always ready (every earlier step has run), so any number of lanes,
 * one included, finishes the segment.
 */
static void run_lane(void *arg, int64_t lane, int64_t end) {
    (void)end;
    lane_job *job = arg;
    const ge_plan *plan = job->plan;
    ge_run *run = job->run;
    const int32_t *ranges = job->segment->ranges;
    ge_context *ctx = &run->lanes[lane < run->n_lanes ? lane : 0];
    int32_t n_streams = plan->n_streams;
    for (;;) {
        /* `progress` first, then the exit test: the last step (or a failure) is published
         * before its bump, so a lane that reads the final bump here also sees the segment
         * done, and one that reads an earlier value is woken by that bump. Read the other
         * way round, a lane could see a step left, then the final bump, find nothing to
         * run and sleep for a bump that never comes (tests/tsan runs hung on it). */
        uint32_t seen = atomic_load(&run->progress);
        if (atomic_load(&run->remaining) <= 0 || atomic_load(&run->failed) >= 0) {
            return;
        }
        int ran = 0;
        for (int32_t k = 0; k < n_streams; k++) {
            int32_t st = (int32_t)((k + lane) % n_streams);
            int32_t stop = ranges[2 * st + 1];
            int32_t pos = atomic_load_explicit(&run->cursor[st], memory_order_relaxed);
            int free_stream = 0;
            if (pos >= stop || atomic_load_explicit(&run->claimed[st], memory_order_relaxed)
                || !atomic_compare_exchange_strong(&run->claimed[st], &free_stream, 1)) {
                continue;
            }
            pos = atomic_load_explicit(&run->cursor[st], memory_order_relaxed);
            while (pos < stop && atomic_load_explicit(&run->failed, memory_order_relaxed) < 0) {
                int32_t s = plan->stream_steps[pos];
                const ge_step_spec *step = &plan->steps[s];
                if (!events_recorded(plan, run, step)) {
                    break;
                }
                if (run_step(plan, run, ctx, s, job->python_step, job->user) != 0) {
                    int32_t none = -1;
                    atomic_compare_exchange_strong(&run->failed, &none, s);
                    bump_progress(run);
                    break;
                }
                record_events(plan, run, step);
                pos++;
                atomic_store_explicit(&run->cursor[st], pos, memory_order_relaxed);
                atomic_fetch_sub(&run->remaining, 1);
                ran = 1;
                /* Give the stream back after every step, then take it again: a lane the
                 * OS preempts holds up one step of its stream, not the rest of it. */
                atomic_store_explicit(&run->claimed[st], 0, memory_order_release);
                bump_progress(run);
                free_stream = 0;
                if (!atomic_compare_exchange_strong(&run->claimed[st], &free_stream, 1)) {
                    break;
                }
                pos = atomic_load_explicit(&run->cursor[st], memory_order_relaxed);
            }
            if (free_stream == 0) {
                atomic_store_explicit(&run->claimed[st], 0, memory_order_release);
            }
        }
        if (!ran) {
            wait_for_progress(run, seen);
        }
    }
}

/* Runs a concurrent segment; returns -1, or the failed step with its message set. */
static int32_t run_segment(const ge_plan *plan, ge_run *run, const ge_segment *segment,
                           ge_python_step_fn python_step, void *user) {
    for (int32_t st = 0; st < plan->n_streams; st++) {
        atomic_store_explicit(&run->cursor[st], segment->ranges[2 * st], memory_order_relaxed);
        atomic_store_explicit(&run->claimed[st], 0, memory_order_relaxed);
    }
    atomic_store(&run->remaining, segment->end - segment->begin);
    atomic_store(&run->failed, -1);
    lane_job job = {plan, run, segment, python_step, user};
    int64_t lanes = segment->n_streams < run->n_lanes ? segment->n_streams : run->n_lanes;
    /* One chunk per lane: the pool's workers become lanes, the caller too; when the pool
     * is busy (a nested or concurrent run) the caller alone is every lane. */
    ge_parallel_for(&run->ctx, lanes, 1, run_lane, &job);
    return atomic_load(&run->failed);
}

int32_t ge_plan_run(const ge_plan *plan, ge_run *run, void *const *inputs, void *const *outputs,
                    ge_python_step_fn python_step, void *user) {
    for (int32_t p = 0; p < plan->n_patches; p++) {
        const ge_patch *patch = &plan->patches[p];
        void *base = patch->storage == GE_STORAGE_INPUT ? inputs[patch->index]
                                                        : outputs[patch->index];
        run->slots[patch->slot].data = (unsigned char *)base + patch->offset;
    }
    atomic_store_explicit(&run->error_set, 0, memory_order_relaxed);
    run->error[0] = '\0';
    run->generation++;

    /* Steps outside concurrent segments run here, one after another; with a single lane
     * (one stream, or a pool of one thread) every step does, in plan order, which the
     * schedule guarantees is a valid order. */
    const ge_segment *segment = run->n_lanes > 1 ? plan->segments : NULL;
    const ge_segment *last = segment != NULL ? plan->segments + plan->n_segments : NULL;
    for (int32_t s = 0; s < plan->n_steps;) {
        if (segment != NULL && segment < last && s == segment->begin) {
            int32_t failed = run_segment(plan, run, segment, python_step, user);
            if (failed >= 0) {
                return failed;
            }
            s = segment->end;
            segment++;
            continue;
        }
        if (run_step(plan, run, &run->ctx, s, python_step, user) != 0) {
            return s;
        }
        record_events(plan, run, &plan->steps[s]);
        s++;
    }
    return -1;
}

/* For module.c: the shared attribute blob of steps without attributes. */
void *ge_empty_attrs(void) {
    return (void *)no_attrs;
}
