/*
 * If, Loop and Scan as executor steps (closure.h): each body is a compiled sub-plan, run
 * with ge_plan_run on a run taken from the sub-plan's own pool, without leaving C.
 *
 * The packer's blob (ge_hub/kernels/closure.py), after the binding's header, is
 * int64 values:
 *
 *   If:   0, cond input, n outputs, n_then, n_else, then inputs[n_then],
 *         else inputs[n_else]                     (sub-plans: then, else)
 *   Loop: 1, M input or -1, cond input or -1, N carried, K scan outputs, C captured,
 *         v_initial inputs[N], captured inputs[C], scratch offsets[N]   (sub-plan: body)
 *   Scan: 2, N states, M scanned, K scan outputs, C captured, length L,
 *         initial inputs[N], scanned inputs[M], their directions[M], output
 *         directions[K], captured inputs[C], scratch offsets[N]        (sub-plan: body)
 *
 * "inputs" are indices of the step's inputs. A body's sub-plan takes, in order: Loop (the
 * iteration number, the condition, N carried, C captured) and gives (condition, N
 * carried, K scan slices); Scan (N states, M slices, C captured) -> (N states, K slices);
 * an If branch (its captured values) -> (the If's outputs).
 *
 * Carried values ping-pong between the step's output and a scratch buffer of the same
 * size, so an iteration reads the previous one's result in place; when the trip count is
 * known the first buffer is chosen so that the last iteration writes the output itself,
 * otherwise (a loop the condition ends) one copy at the end may be needed. Scanned inputs
 * are read and scan outputs written in place, one slice (along axis 0) per iteration.
 * Every size is checked against the sub-plan once per call, never per iteration.
 */
#include "closure.h"

#include <stdlib.h>
#include <string.h>

#include "../src/executor.h"

enum { CONTROL_IF = 0, CONTROL_LOOP = 1, CONTROL_SCAN = 2 };

/* A non-NULL address for zero-byte buffers. */
static int64_t no_bytes[1];

typedef struct {
    ge_context *ctx;
    const ge_tensor *inputs;
    int32_t n_inputs;
    const ge_tensor *outputs;
    int32_t n_outputs;
    ge_plan **plans;
    int64_t n_plans;
    const unsigned char *values;  /* the packer's int64 values */
    int64_t n_values;
    int64_t next;
    int ok;
} reader;

static int64_t take(reader *r) {
    if (r->next >= r->n_values) {
        r->ok = 0;
        return 0;
    }
    return ge_blob_load_int(r->values, r->next++);
}

/* An index of a step input that must be present. */
static const ge_tensor *input_at(reader *r, int64_t index) {
    if (index < 0 || index >= r->n_inputs || r->inputs[index].data == NULL) {
        r->ok = 0;
        return NULL;
    }
    return &r->inputs[index];
}

/* Bytes of one slice of `t` along axis 0 (its rank is at least 1). */
static int64_t slice_bytes(const ge_tensor *t) {
    int64_t bytes = (int64_t)ge_dtype_itemsize(t->dtype);
    for (int32_t d = 1; d < t->ndim; d++) {
        bytes *= t->shape[d];
    }
    return bytes;
}

static void *data_of(const ge_tensor *t) {
    return t->data != NULL ? t->data : (void *)no_bytes;
}

/* Checks that `plan`'s buffers fit: n_in inputs of in_bytes, n_out outputs of out_bytes,
 * no Python steps (no GIL is held here). */
static int check_plan(ge_context *ctx, const ge_plan *plan, const char *what, int32_t n_in,
                      const int64_t *in_bytes, int32_t n_out, const int64_t *out_bytes) {
    if (plan->n_python != 0) {
        return ctx->set_error(ctx, "%s has Python steps; it cannot run inside a C step", what);
    }
    if (plan->n_inputs != n_in || plan->n_outputs != n_out) {
        return ctx->set_error(ctx, "%s takes %d inputs and gives %d outputs; the step passes "
                              "%d and %d", what, plan->n_inputs, plan->n_outputs, n_in, n_out);
    }
    for (int32_t i = 0; i < n_in; i++) {
        if (plan->input_nbytes[i] != in_bytes[i]) {
            return ctx->set_error(ctx, "%s input %d is %lld bytes, the step passes %lld", what,
                                  i, (long long)plan->input_nbytes[i], (long long)in_bytes[i]);
        }
    }
    for (int32_t i = 0; i < n_out; i++) {
        if (plan->output_nbytes[i] != out_bytes[i]) {
            return ctx->set_error(ctx, "%s output %d is %lld bytes, the step expects %lld", what,
                                  i, (long long)plan->output_nbytes[i],
                                  (long long)out_bytes[i]);
        }
    }
    return 0;
}

/* Runs `plan` once on `run`; on failure records the body's message with `what`. */
static int run_body(ge_context *ctx, ge_plan *plan, ge_run *run, void *const *ins,
                    void *const *outs, const char *what, int64_t iteration) {
    int32_t failed = ge_plan_run(plan, run, ins, outs, NULL, NULL);
    if (failed < 0) {
        return 0;
    }
    const ge_step_spec *step = &plan->steps[failed];
    if (iteration >= 0) {
        return ctx->set_error(ctx, "%s, iteration %lld: node '%s' (op %s): %s", what,
                              (long long)iteration, step->node, step->op, run->error);
    }
    return ctx->set_error(ctx, "%s: node '%s' (op %s): %s", what, step->node, step->op,
                          run->error);
}

/* Room for the pointer and size arrays of one call, on the heap (counts are unbounded). */
typedef struct {
    void **ins, **outs;
    int64_t *in_bytes, *out_bytes;
    void **carried, **spare;
} buffers;

static int buffers_alloc(buffers *b, int64_t n_in, int64_t n_out, int64_t n_carried) {
    b->ins = calloc((size_t)n_in + 1, sizeof(void *));
    b->outs = calloc((size_t)n_out + 1, sizeof(void *));
    b->in_bytes = calloc((size_t)n_in + 1, sizeof(int64_t));
    b->out_bytes = calloc((size_t)n_out + 1, sizeof(int64_t));
    b->carried = calloc((size_t)n_carried + 1, sizeof(void *));
    b->spare = calloc((size_t)n_carried + 1, sizeof(void *));
    return b->ins && b->outs && b->in_bytes && b->out_bytes && b->carried && b->spare ? 0 : -1;
}

static void buffers_free(buffers *b) {
    free(b->ins);
    free(b->outs);
    free(b->in_bytes);
    free(b->out_bytes);
    free(b->carried);
    free(b->spare);
}

static int bad_blob(ge_context *ctx, const char *op) {
    return ctx->set_error(ctx, "%s: malformed control attributes", op);
}

/* -- If ------------------------------------------------------------------------------- */

static int run_if(reader *r) {
    ge_context *ctx = r->ctx;
    const ge_tensor *cond = input_at(r, take(r));
    int64_t n_out = take(r), n_then = take(r), n_else = take(r);
    if (!r->ok || r->n_plans != 2 || n_out != r->n_outputs || n_then < 0 || n_else < 0
        || n_then > r->n_inputs || n_else > r->n_inputs || cond->numel != 1
        || cond->dtype != GE_BOOL) {
        return bad_blob(ctx, "If");
    }
    int taken = *(const unsigned char *)cond->data != 0;
    int64_t first = r->next + (taken ? 0 : n_then);
    int64_t count = taken ? n_then : n_else;
    ge_plan *plan = r->plans[taken ? 0 : 1];
    const char *what = taken ? "If then_branch" : "If else_branch";
    buffers b;
    int status = -1;
    if (buffers_alloc(&b, count, n_out, 0) != 0) {
        ctx->set_error(ctx, "If: out of memory");
        goto done;
    }
    r->next = first;
    for (int64_t i = 0; i < count; i++) {
        const ge_tensor *t = input_at(r, take(r));
        if (!r->ok) {
            bad_blob(ctx, "If");
            goto done;
        }
        b.ins[i] = data_of(t);
        b.in_bytes[i] = (int64_t)ge_tensor_nbytes(t);
    }
    for (int64_t k = 0; k < n_out; k++) {
        b.outs[k] = data_of(&r->outputs[k]);
        b.out_bytes[k] = (int64_t)ge_tensor_nbytes(&r->outputs[k]);
    }
    if (check_plan(ctx, plan, what, (int32_t)count, b.in_bytes, (int32_t)n_out, b.out_bytes)
        != 0) {
        goto done;
    }
    ge_run *run = ge_run_acquire(plan);
    if (run == NULL) {
        ctx->set_error(ctx, "If: out of memory");
        goto done;
    }
    status = run_body(ctx, plan, run, b.ins, b.outs, what, -1);
    ge_run_release(plan, run);
done:
    buffers_free(&b);
    return status;
}

/* -- Loop and Scan share the carried-value ping-pong ------------------------------------ */

typedef struct {
    int64_t n;                /* carried values */
    void **current;           /* where each one is now */
    void **spare;             /* the scratch buffer of each */
    const ge_tensor *outputs; /* final values: the step's outputs 0..n-1 */
    int64_t *bytes;
} carry;

/* The buffer iteration `i` writes carried value k into: alternating between the output
 * and the scratch copy, starting so that iteration `last` (when known, else -1) writes
 * the output. */
static void *carry_target(const carry *c, int64_t k, int64_t i, int64_t last) {
    int64_t phase = last >= 0 ? (last - i) % 2 : i % 2;
    return phase == 0 ? data_of(&c->outputs[k]) : c->spare[k];
}

static void carry_finish(const carry *c) {
    for (int64_t k = 0; k < c->n; k++) {
        void *out = data_of(&c->outputs[k]);
        if (c->current[k] != out && c->bytes[k] > 0) {
            memcpy(out, c->current[k], (size_t)c->bytes[k]);
        }
    }
}

/* Reads N scratch offsets and points each spare buffer into the scratch. */
static int carry_scratch(reader *r, carry *c) {
    for (int64_t k = 0; k < c->n; k++) {
        int64_t offset = take(r);
        if (!r->ok || offset < 0 || c->bytes[k] < 0
            || (size_t)offset + (size_t)c->bytes[k] > r->ctx->scratch_bytes) {
            return -1;
        }
        c->spare[k] = c->bytes[k] > 0 ? (unsigned char *)r->ctx->scratch + offset
                                      : (void *)no_bytes;
    }
    return 0;
}

/* -- Loop ------------------------------------------------------------------------------- */

static int run_loop(reader *r) {
    ge_context *ctx = r->ctx;
    int64_t m_index = take(r), cond_index = take(r);
    int64_t n = take(r), k_scans = take(r), n_cap = take(r);
    if (!r->ok || r->n_plans != 1 || n < 0 || k_scans < 0 || n_cap < 0
        || n > r->n_inputs || n_cap > r->n_inputs || n + k_scans != r->n_outputs) {
        return bad_blob(ctx, "Loop");
    }
    int64_t trips = -1;  /* no limit */
    int going = 1;
    if (m_index >= 0) {
        const ge_tensor *m = input_at(r, m_index);
        if (!r->ok || m->dtype != GE_INT64 || m->numel != 1) {
            return bad_blob(ctx, "Loop");
        }
        trips = *(const int64_t *)m->data;
        if (trips < 0) {
            trips = 0;
        }
    }
    if (cond_index >= 0) {
        const ge_tensor *cond = input_at(r, cond_index);
        if (!r->ok || cond->dtype != GE_BOOL || cond->numel != 1) {
            return bad_blob(ctx, "Loop");
        }
        going = *(const unsigned char *)cond->data != 0;
    }
    ge_plan *plan = r->plans[0];
    int64_t n_in = 2 + n + n_cap, n_out = 1 + n + k_scans;
    buffers b;
    int status = -1;
    ge_run *run = NULL;
    if (buffers_alloc(&b, n_in, n_out, n) != 0) {
        ctx->set_error(ctx, "Loop: out of memory");
        goto done;
    }
    carry c = {n, b.carried, b.spare, r->outputs, b.in_bytes + 2};
    b.in_bytes[0] = 8;
    b.in_bytes[1] = 1;
    b.out_bytes[0] = 1;
    for (int64_t k = 0; k < n; k++) {
        const ge_tensor *initial = input_at(r, take(r));
        if (!r->ok) {
            bad_blob(ctx, "Loop");
            goto done;
        }
        b.carried[k] = data_of(initial);
        b.in_bytes[2 + k] = (int64_t)ge_tensor_nbytes(initial);
        b.out_bytes[1 + k] = (int64_t)ge_tensor_nbytes(&r->outputs[k]);
        if (b.in_bytes[2 + k] != b.out_bytes[1 + k]) {
            ctx->set_error(ctx, "Loop: carried value %lld is %lld bytes initially and %lld "
                           "finally; a C loop needs one size", (long long)k,
                           (long long)b.in_bytes[2 + k], (long long)b.out_bytes[1 + k]);
            goto done;
        }
    }
    for (int64_t j = 0; j < n_cap; j++) {
        const ge_tensor *t = input_at(r, take(r));
        if (!r->ok) {
            bad_blob(ctx, "Loop");
            goto done;
        }
        b.ins[2 + n + j] = data_of(t);
        b.in_bytes[2 + n + j] = (int64_t)ge_tensor_nbytes(t);
    }
    if (carry_scratch(r, &c) != 0) {
        bad_blob(ctx, "Loop");
        goto done;
    }
    /* Scan outputs were planned for a known trip count: their first dim. */
    int64_t planned = -1;
    for (int64_t j = 0; j < k_scans; j++) {
        const ge_tensor *out = &r->outputs[n + j];
        if (out->ndim < 1) {
            bad_blob(ctx, "Loop");
            goto done;
        }
        if (planned >= 0 && out->shape[0] != planned) {
            bad_blob(ctx, "Loop");
            goto done;
        }
        planned = out->shape[0];
        b.out_bytes[1 + n + j] = slice_bytes(out);
    }
    if (k_scans > 0 && (cond_index >= 0 || trips != planned)) {
        ctx->set_error(ctx, "Loop: its scan outputs were planned for %lld iterations, but it "
                       "runs %lld%s", (long long)planned, (long long)trips,
                       cond_index >= 0 ? " or fewer (it has a condition)" : "");
        goto done;
    }
    if (check_plan(ctx, plan, "Loop body", (int32_t)n_in, b.in_bytes, (int32_t)n_out,
                   b.out_bytes) != 0) {
        goto done;
    }
    if ((run = ge_run_acquire(plan)) == NULL) {
        ctx->set_error(ctx, "Loop: out of memory");
        goto done;
    }
    int64_t last = cond_index >= 0 || trips < 0 ? -1 : trips - 1;
    int64_t iteration_number = 0;
    unsigned char cond_in = 1, cond_out = 1;
    b.ins[0] = &iteration_number;
    b.ins[1] = &cond_in;
    b.outs[0] = &cond_out;
    for (int64_t i = 0; going && (trips < 0 || i < trips); i++) {
        iteration_number = i;
        cond_in = (unsigned char)going;
        for (int64_t k = 0; k < n; k++) {
            b.ins[2 + k] = b.carried[k];
            b.outs[1 + k] = carry_target(&c, k, i, last);
        }
        for (int64_t j = 0; j < k_scans; j++) {
            b.outs[1 + n + j] = (unsigned char *)data_of(&r->outputs[n + j])
                                + i * b.out_bytes[1 + n + j];
        }
        if (run_body(ctx, plan, run, b.ins, b.outs, "Loop body", i) != 0) {
            goto done;
        }
        for (int64_t k = 0; k < n; k++) {
            b.carried[k] = b.outs[1 + k];
        }
        if (cond_index >= 0) {
            going = cond_out != 0;
        }
    }
    carry_finish(&c);
    status = 0;
done:
    if (run != NULL) {
        ge_run_release(plan, run);
    }
    buffers_free(&b);
    return status;
}

/* -- Scan ------------------------------------------------------------------------------- */

static int run_scan(reader *r) {
    ge_context *ctx = r->ctx;
    int64_t n = take(r), m = take(r), k_scans = take(r), n_cap = take(r), length = take(r);
    if (!r->ok || r->n_plans != 1 || n < 0 || m < 1 || k_scans < 0 || n_cap < 0
        || length < 0 || n > r->n_inputs || m > r->n_inputs || n_cap > r->n_inputs
        || n + k_scans != r->n_outputs) {
        return bad_blob(ctx, "Scan");
    }
    ge_plan *plan = r->plans[0];
    int64_t n_in = n + m + n_cap, n_out = n + k_scans;
    buffers b;
    int status = -1;
    ge_run *run = NULL;
    const ge_tensor **scanned = calloc((size_t)m + 1, sizeof *scanned);
    int64_t *in_dirs = calloc((size_t)(m + k_scans) + 1, sizeof(int64_t));
    if (buffers_alloc(&b, n_in, n_out, n) != 0 || scanned == NULL || in_dirs == NULL) {
        ctx->set_error(ctx, "Scan: out of memory");
        goto done;
    }
    int64_t *out_dirs = in_dirs + m;
    carry c = {n, b.carried, b.spare, r->outputs, b.in_bytes};
    for (int64_t k = 0; k < n; k++) {
        const ge_tensor *initial = input_at(r, take(r));
        if (!r->ok) {
            bad_blob(ctx, "Scan");
            goto done;
        }
        b.carried[k] = data_of(initial);
        b.in_bytes[k] = (int64_t)ge_tensor_nbytes(initial);
        b.out_bytes[k] = (int64_t)ge_tensor_nbytes(&r->outputs[k]);
        if (b.in_bytes[k] != b.out_bytes[k]) {
            ctx->set_error(ctx, "Scan: state %lld changes size", (long long)k);
            goto done;
        }
    }
    for (int64_t j = 0; j < m; j++) {
        scanned[j] = input_at(r, take(r));
        if (!r->ok || scanned[j]->ndim < 1 || scanned[j]->shape[0] != length) {
            bad_blob(ctx, "Scan");
            goto done;
        }
        b.in_bytes[n + j] = slice_bytes(scanned[j]);
    }
    for (int64_t j = 0; j < m + k_scans; j++) {
        in_dirs[j] = take(r) != 0;
    }
    for (int64_t j = 0; j < n_cap; j++) {
        const ge_tensor *t = input_at(r, take(r));
        if (!r->ok) {
            bad_blob(ctx, "Scan");
            goto done;
        }
        b.ins[n + m + j] = data_of(t);
        b.in_bytes[n + m + j] = (int64_t)ge_tensor_nbytes(t);
    }
    for (int64_t j = 0; j < k_scans; j++) {
        const ge_tensor *out = &r->outputs[n + j];
        if (out->ndim < 1 || out->shape[0] != length) {
            bad_blob(ctx, "Scan");
            goto done;
        }
        b.out_bytes[n + j] = slice_bytes(out);
    }
    if (!r->ok || carry_scratch(r, &c) != 0) {
        bad_blob(ctx, "Scan");
        goto done;
    }
    if (length == 0) {
        carry_finish(&c);
        status = 0;
        goto done;
    }
    if (check_plan(ctx, plan, "Scan body", (int32_t)n_in, b.in_bytes, (int32_t)n_out,
                   b.out_bytes) != 0) {
        goto done;
    }
    if ((run = ge_run_acquire(plan)) == NULL) {
        ctx->set_error(ctx, "Scan: out of memory");
        goto done;
    }
    for (int64_t t = 0; t < length; t++) {
        for (int64_t k = 0; k < n; k++) {
            b.ins[k] = b.carried[k];
            b.outs[k] = carry_target(&c, k, t, length - 1);
        }
        for (int64_t j = 0; j < m; j++) {
            int64_t at = in_dirs[j] ? length - 1 - t : t;
            b.ins[n + j] = (unsigned char *)data_of(scanned[j]) + at * b.in_bytes[n + j];
        }
        for (int64_t j = 0; j < k_scans; j++) {
            int64_t at = out_dirs[j] ? length - 1 - t : t;
            b.outs[n + j] = (unsigned char *)data_of(&r->outputs[n + j]) + at * b.out_bytes[n + j];
        }
        if (run_body(ctx, plan, run, b.ins, b.outs, "Scan body", t) != 0) {
            goto done;
        }
        for (int64_t k = 0; k < n; k++) {
            b.carried[k] = b.outs[k];
        }
    }
    carry_finish(&c);
    status = 0;
done:
    if (run != NULL) {
        ge_run_release(plan, run);
    }
    free(scanned);
    free(in_dirs);
    buffers_free(&b);
    return status;
}

GE_KERNEL(ge_control) {
    ge_blob blob = ge_blob_open(attrs, attrs_size);
    const unsigned char *header = ge_blob_take(&blob, 2);
    if (header == NULL || (uint64_t)ge_blob_load_int(header, 0) != GE_CONTROL_MAGIC) {
        return ctx->set_error(ctx, "control step: its attributes lack the sub-plan header "
                              "the executor writes");
    }
    int64_t n_plans = ge_blob_load_int(header, 1);
    const unsigned char *pointers = ge_blob_take(&blob, n_plans);
    if (pointers == NULL) {
        return ctx->set_error(ctx, "control step: malformed sub-plan header");
    }
    int64_t n_values = ge_blob_left(&blob);
    reader r = {ctx, inputs, n_inputs, outputs, n_outputs, NULL, n_plans,
                ge_blob_take(&blob, n_values), n_values, 0, 1};
    ge_plan *plans[2] = {NULL, NULL};
    if (n_plans > 2) {
        return ctx->set_error(ctx, "control step: %lld sub-plans, at most 2",
                              (long long)n_plans);
    }
    memcpy(plans, pointers, (size_t)n_plans * sizeof(void *));
    r.plans = plans;
    switch (take(&r)) {
    case CONTROL_IF: return run_if(&r);
    case CONTROL_LOOP: return run_loop(&r);
    case CONTROL_SCAN: return run_scan(&r);
    default: return bad_blob(ctx, "control step");
    }
}
