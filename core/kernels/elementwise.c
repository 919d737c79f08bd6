/*
 * Elementwise kernels with two or more inputs, broadcasting without copies.
 *
 * The Python packer (ge_hub/kernels/elementwise.py) resolves broadcasting at compile time
 * into a collapsed output shape and per-operand strides (layout in elementwise.h). A
 * kernel walks its share of the flat output in rows of the last collapsed dim; on each
 * row every operand either advances (stride 1) or stays on one element (stride 0), so
 * the inner loops are the four plain, vectorizable loops `vv`, `vs`, `sv` and `ss`.
 * Same-shape inputs collapse to one row, a scalar to stride 0, a bias row to rows.
 *
 * The semantics are those of the NumPy references in ge_hub/ops/elementwise.py:
 * IEEE floats (NaN propagates through Max and Min), integers wrapping like
 * two's-complement (computed in unsigned arithmetic, so no signed overflow), integer
 * division truncating toward zero with INT_MIN / -1 wrapping to INT_MIN, and integer
 * division or modulo by zero reported as an error instead of a SIGFPE. Pow, Sum and Mean
 * of float32 are computed in double and rounded once, as the references do.
 *
 * Every kernel may write its output over an input of the same dtype and size (the
 * registrations declare which): each element is read before it is written.
 */
#include <math.h>
#include <string.h>

#include "elementwise.h"

/* Operands walked together: two for binary ops, three for Where. */
#define EW_MAX_OPERANDS 3
/* Header ints of the blob: n_operands, ndim. */
#define EW_HEADER 2
/* Elements per block of the variadic accumulator (kept on the stack). */
#define EW_BLOCK 512
/* Elements below which a parallel loop costs more than it saves. */
#define EW_GRAIN_CHEAP GE_EW_GRAIN_CHEAP
#define EW_GRAIN_COSTLY 4096

/* -- the layout from the blob ---------------------------------------------------------- */

typedef struct {
    const char *op;        /* for error messages */
    const void *blob;      /* int64 values, checked in length by read_layout */
    int32_t n_operands;
    int32_t ndim;
    int64_t shape[GE_MAX_RANK];
    int64_t numel;
    int64_t extra_at;      /* index of the first op-specific int */
} ew_layout;

static inline int64_t layout_stride(const ew_layout *layout, int32_t operand, int32_t axis) {
    return ge_blob_load_int(layout->blob, EW_HEADER + layout->ndim
                            + (int64_t)operand * layout->ndim + axis);
}

static inline int64_t layout_extra(const ew_layout *layout, int32_t index) {
    return ge_blob_load_int(layout->blob, layout->extra_at + index);
}

/*
 * Read and check the blob against the step's tensors, so that no blob can make a kernel
 * read or write outside them: the shape must hold exactly the output's elements, and
 * every operand's furthest element must lie inside that operand.
 */
static int read_layout(ge_context *ctx, const char *op, const void *attrs, size_t attrs_size,
                       const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                       int32_t n_outputs, int32_t n_extra, ew_layout *layout) {
    if (n_outputs != 1) {
        return ctx->set_error(ctx, "%s: expected 1 output, got %d", op, n_outputs);
    }
    if (attrs == NULL || attrs_size % 8 != 0 || attrs_size < 8 * (EW_HEADER + 2)) {
        return ctx->set_error(ctx, "%s: the attribute blob has %zu bytes, expected a "
                              "broadcast layout of int64 values", op, attrs_size);
    }
    int64_t n_ints = (int64_t)(attrs_size / 8);
    int64_t n_operands = ge_blob_load_int(attrs, 0), ndim = ge_blob_load_int(attrs, 1);
    if (n_operands != n_inputs) {
        return ctx->set_error(ctx, "%s: the attribute blob describes %lld operands, the step "
                              "has %d inputs", op, (long long)n_operands, n_inputs);
    }
    if (ndim < 1 || ndim > GE_MAX_RANK) {
        return ctx->set_error(ctx, "%s: the attribute blob has rank %lld, expected 1..%d", op,
                              (long long)ndim, GE_MAX_RANK);
    }
    int64_t expected = EW_HEADER + ndim + n_operands * ndim + n_extra;
    if (n_ints != expected) {
        return ctx->set_error(ctx, "%s: the attribute blob has %lld int64 values, expected "
                              "%lld for %lld operands of rank %lld", op, (long long)n_ints,
                              (long long)expected, (long long)n_operands, (long long)ndim);
    }
    layout->op = op;
    layout->blob = attrs;
    layout->n_operands = (int32_t)n_operands;
    layout->ndim = (int32_t)ndim;
    layout->extra_at = EW_HEADER + ndim + n_operands * ndim;
    int64_t numel = 1;
    for (int32_t axis = 0; axis < ndim; axis++) {
        int64_t dim = ge_blob_load_int(attrs, EW_HEADER + axis);
        if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel)) {
            return ctx->set_error(ctx, "%s: the attribute blob has an invalid shape", op);
        }
        layout->shape[axis] = dim;
    }
    layout->numel = numel;
    if (numel != outputs[0].numel || outputs[0].data == NULL) {
        return ctx->set_error(ctx, "%s: the attribute blob describes %lld output elements, "
                              "the output has %lld", op, (long long)numel,
                              (long long)outputs[0].numel);
    }
    if (numel == 0) {
        return 0;
    }
    for (int32_t i = 0; i < n_operands; i++) {
        if (inputs[i].data == NULL) {
            return ctx->set_error(ctx, "%s: input %d is omitted", op, i);
        }
        int64_t furthest = 0;
        for (int32_t axis = 0; axis < ndim; axis++) {
            int64_t stride = layout_stride(layout, i, axis), reach;
            int bad = stride < 0 || (axis == ndim - 1 && stride > 1)
                      || __builtin_mul_overflow(layout->shape[axis] - 1, stride, &reach)
                      || __builtin_add_overflow(furthest, reach, &furthest);
            if (bad) {
                return ctx->set_error(ctx, "%s: the attribute blob has an invalid stride for "
                                      "input %d", op, i);
            }
        }
        if (furthest >= inputs[i].numel) {
            return ctx->set_error(ctx, "%s: input %d has %lld elements, the attribute blob "
                                  "reads element %lld", op, i, (long long)inputs[i].numel,
                                  (long long)furthest);
        }
    }
    return 0;
}

static int check_dtype(ge_context *ctx, const char *op, const char *role, int32_t index,
                       const ge_tensor *tensor, int32_t dtype) {
    if (tensor->dtype != dtype) {
        return ctx->set_error(ctx, "%s: %s %d has dtype code %d, expected %d", op, role, index,
                              tensor->dtype, dtype);
    }
    return 0;
}

/* Run range(arg, 0, n) on the pool, or inline when it is too small to share. */
static void run_range(ge_context *ctx, int64_t n, int64_t grain, ge_range_fn range,
                      void *arg) {
    if (n <= grain) {
        range(arg, 0, n);
    } else {
        ctx->parallel_for(ctx, n, grain, range, arg);
    }
}

/* -- walking the output in rows ---------------------------------------------------------- */

/* A position in the collapsed output and, for each walked operand, its element offset. */
typedef struct {
    int32_t ndim;
    int32_t n_operands;
    int64_t shape[GE_MAX_RANK];
    int64_t stride[EW_MAX_OPERANDS][GE_MAX_RANK];
    int64_t index[GE_MAX_RANK];
    int64_t offset[EW_MAX_OPERANDS];
} ew_cursor;

/* A cursor over `count` operands of the layout, starting at `first`, at flat index `flat`. */
static void cursor_start(ew_cursor *c, const ew_layout *layout, int32_t first, int32_t count,
                         int64_t flat) {
    c->ndim = layout->ndim;
    c->n_operands = count;
    for (int32_t axis = layout->ndim - 1; axis >= 0; axis--) {
        c->shape[axis] = layout->shape[axis];
        c->index[axis] = flat % layout->shape[axis];
        flat /= layout->shape[axis];
    }
    for (int32_t j = 0; j < count; j++) {
        c->offset[j] = 0;
        for (int32_t axis = 0; axis < layout->ndim; axis++) {
            c->stride[j][axis] = layout_stride(layout, first + j, axis);
            c->offset[j] += c->index[axis] * c->stride[j][axis];
        }
    }
}

/* Elements left in the current row. */
static inline int64_t cursor_row_left(const ew_cursor *c) {
    return c->shape[c->ndim - 1] - c->index[c->ndim - 1];
}

/* Move to the start of the next row (the row's own index stays put while it is walked). */
static inline void cursor_next_row(ew_cursor *c) {
    int32_t last = c->ndim - 1;
    for (int32_t j = 0; j < c->n_operands; j++) {
        c->offset[j] -= c->index[last] * c->stride[j][last];
    }
    c->index[last] = 0;
    for (int32_t axis = last - 1; axis >= 0; axis--) {
        c->index[axis]++;
        for (int32_t j = 0; j < c->n_operands; j++) {
            c->offset[j] += c->stride[j][axis];
        }
        if (c->index[axis] < c->shape[axis]) {
            return;
        }
        for (int32_t j = 0; j < c->n_operands; j++) {
            c->offset[j] -= c->shape[axis] * c->stride[j][axis];
        }
        c->index[axis] = 0;
    }
}

/* -- binary ops -------------------------------------------------------------------------- */

/* Integer division and modulo: a zero divisor fails the row (and writes 0). */
#define EW_DIVISION_LOOPS(NAME, T, EXPR)                                                   \
    static int NAME##_vv(void *out_, const void *a_, const void *b_, int64_t n) {        \
        T *out = out_;                                                                    \
        const T *a = a_, *b = b_;                                                         \
        int zero = 0;                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T x = a[i], y = b[i];                                                         \
            zero |= y == 0;                                                               \
            out[i] = y == 0 ? 0 : (EXPR);                                                 \
        }                                                                                 \
        return zero;                                                                      \
    }                                                                                     \
    static int NAME##_vs(void *out_, const void *a_, const void *b_, int64_t n) {        \
        T *out = out_;                                                                    \
        const T *a = a_, y = *(const T *)b_;                                              \
        if (y == 0) {                                                                     \
            return n > 0;                                                                 \
        }                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T x = a[i];                                                                   \
            out[i] = (EXPR);                                                              \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    static int NAME##_sv(void *out_, const void *a_, const void *b_, int64_t n) {        \
        T *out = out_;                                                                    \
        const T x = *(const T *)a_, *b = b_;                                              \
        int zero = 0;                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T y = b[i];                                                                   \
            zero |= y == 0;                                                               \
            out[i] = y == 0 ? 0 : (EXPR);                                                 \
        }                                                                                 \
        return zero;                                                                      \
    }                                                                                     \
    static int NAME##_ss(void *out_, const void *a_, const void *b_, int64_t n) {        \
        T *out = out_;                                                                    \
        const T x = *(const T *)a_, y = *(const T *)b_;                                   \
        if (y == 0) {                                                                     \
            return n > 0;                                                                 \
        }                                                                                 \
        const T value = (EXPR);                                                           \
        for (int64_t i = 0; i < n; i++) {                                                 \
            out[i] = value;                                                               \
        }                                                                                 \
        return 0;                                                                         \
    }                                                                                     \
    static const ge_ew_loop2 NAME##_loops[4] = {NAME##_vv, NAME##_vs, NAME##_sv, NAME##_ss};

/* IEEE maximum and minimum with NaN propagating from either side, like np.maximum. */
static inline float max_f32(float x, float y) { return (x > y || x != x) ? x : y; }
static inline float min_f32(float x, float y) { return (x < y || x != x) ? x : y; }

/* Two's-complement wrapping, through unsigned arithmetic (signed overflow is UB in C). */
#define WRAP(T, U, x, OP, y) ((T)((U)(x) OP (U)(y)))

/* Division truncating toward zero; the divisor -1 negates with wraparound (INT_MIN / -1 is
 * INT_MIN), since C's INT_MIN / -1 traps. */
#define TRUNC_DIV(T, U, x, y) ((y) == -1 ? (T)((U)0 - (U)(x)) : (T)((x) / (y)))
/* C's % (sign of the dividend); INT_MIN % -1 traps in C and is 0. */
#define TRUNC_MOD(T, x, y) ((y) == -1 ? (T)0 : (T)((x) % (y)))
/* Python's % (sign of the divisor): C's remainder moved into the divisor's sign. */
#define FLOOR_MOD(T, x, y) floor_fix_##T(TRUNC_MOD(T, x, y), (y))
static inline int32_t floor_fix_int32_t(int32_t r, int32_t y) {
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}
static inline int64_t floor_fix_int64_t(int64_t r, int64_t y) {
    return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r;
}

GE_EW_BINARY_LOOPS(add_f32, float, float, float, x + y)
GE_EW_BINARY_LOOPS(sub_f32, float, float, float, x - y)
GE_EW_BINARY_LOOPS(mul_f32, float, float, float, x * y)
GE_EW_BINARY_LOOPS(div_f32, float, float, float, x / y)
GE_EW_BINARY_LOOPS(mod_f32, float, float, float, fmodf(x, y))
GE_EW_BINARY_LOOPS(max_f32, float, float, float, max_f32(x, y))
GE_EW_BINARY_LOOPS(min_f32, float, float, float, min_f32(x, y))
/* float64: what exporters write for double-precision models (torch's float64 tensors). */
GE_EW_BINARY_LOOPS(add_f64, double, double, double, x + y)
GE_EW_BINARY_LOOPS(sub_f64, double, double, double, x - y)
GE_EW_BINARY_LOOPS(mul_f64, double, double, double, x * y)
GE_EW_BINARY_LOOPS(div_f64, double, double, double, x / y)

#define EW_INTEGER_LOOPS(T, U, SUFFIX)                                                     \
    GE_EW_BINARY_LOOPS(add_##SUFFIX, T, T, T, WRAP(T, U, x, +, y))                           \
    GE_EW_BINARY_LOOPS(sub_##SUFFIX, T, T, T, WRAP(T, U, x, -, y))                           \
    GE_EW_BINARY_LOOPS(mul_##SUFFIX, T, T, T, WRAP(T, U, x, *, y))                           \
    GE_EW_BINARY_LOOPS(max_##SUFFIX, T, T, T, x > y ? x : y)                                 \
    GE_EW_BINARY_LOOPS(min_##SUFFIX, T, T, T, x < y ? x : y)                                 \
    EW_DIVISION_LOOPS(div_##SUFFIX, T, TRUNC_DIV(T, U, x, y))                             \
    EW_DIVISION_LOOPS(cmod_##SUFFIX, T, TRUNC_MOD(T, x, y))                               \
    EW_DIVISION_LOOPS(pymod_##SUFFIX, T, FLOOR_MOD(T, x, y))

EW_INTEGER_LOOPS(int32_t, uint32_t, i32)
EW_INTEGER_LOOPS(int64_t, uint64_t, i64)

/* float32 powers, computed in double and rounded once like the reference. */
static inline float pow_f32(float x, double y) { return (float)pow((double)x, y); }
GE_EW_BINARY_LOOPS(pow_f32_i32, float, int32_t, float, pow_f32(x, (double)y))
GE_EW_BINARY_LOOPS(pow_f32_i64, float, int64_t, float, pow_f32(x, (double)y))
GE_EW_BINARY_LOOPS(pow_generic_f32, float, float, float, pow_f32(x, (double)y))

/* A fixed float exponent of 2, 1 or -1 is x * x, x or 1 / x: the same results as pow(),
 * because double rounding is harmless for * and / of floats (53 >= 2 * 24 + 2 bits).
 * 0.5 is not sqrt(x): pow(-0, 0.5) is +0 and pow(-inf, 0.5) is +inf. */
static int pow_f32_vs(void *out_, const void *a_, const void *b_, int64_t n) {
    float *out = out_;
    const float *a = a_;
    const float y = *(const float *)b_;
    if (y == 2.0f) {
        for (int64_t i = 0; i < n; i++) {
            out[i] = a[i] * a[i];
        }
    } else if (y == 1.0f) {
        memmove(out, a, (size_t)n * sizeof *out);
    } else if (y == -1.0f) {
        for (int64_t i = 0; i < n; i++) {
            out[i] = 1.0f / a[i];
        }
    } else {
        return pow_generic_f32_vs(out_, a_, b_, n);
    }
    return 0;
}
static const ge_ew_loop2 pow_f32_f32_loops[4] = {pow_generic_f32_vv, pow_f32_vs,
                                               pow_generic_f32_sv, pow_generic_f32_ss};

/* Comparisons and logic write bool (one byte, 0 or 1). */
#define EW_COMPARE_LOOPS(T, SUFFIX)                                                        \
    GE_EW_BINARY_LOOPS(equal_##SUFFIX, T, T, uint8_t, x == y)                                \
    GE_EW_BINARY_LOOPS(less_##SUFFIX, T, T, uint8_t, x < y)                                  \
    GE_EW_BINARY_LOOPS(less_equal_##SUFFIX, T, T, uint8_t, x <= y)                           \
    GE_EW_BINARY_LOOPS(greater_##SUFFIX, T, T, uint8_t, x > y)                               \
    GE_EW_BINARY_LOOPS(greater_equal_##SUFFIX, T, T, uint8_t, x >= y)

EW_COMPARE_LOOPS(float, f32)
EW_COMPARE_LOOPS(double, f64)
EW_COMPARE_LOOPS(int32_t, i32)
EW_COMPARE_LOOPS(int64_t, i64)
GE_EW_BINARY_LOOPS(equal_bool, uint8_t, uint8_t, uint8_t, (x != 0) == (y != 0))
GE_EW_BINARY_LOOPS(and_bool, uint8_t, uint8_t, uint8_t, (x != 0) & (y != 0))
GE_EW_BINARY_LOOPS(or_bool, uint8_t, uint8_t, uint8_t, (x != 0) | (y != 0))
GE_EW_BINARY_LOOPS(xor_bool, uint8_t, uint8_t, uint8_t, (x != 0) ^ (y != 0))

/* A shift by the bit width or more shifts every bit out (C leaves it undefined). */
GE_EW_BINARY_LOOPS(shift_left_u8, uint8_t, uint8_t, uint8_t, y >= 8 ? 0 : (uint8_t)(x << y))
GE_EW_BINARY_LOOPS(shift_right_u8, uint8_t, uint8_t, uint8_t, y >= 8 ? 0 : (uint8_t)(x >> y))

typedef struct {
    const ge_ew_binary *op;
    const ew_layout *layout;
    char *out;
    const char *a, *b;
    size_t out_size, a_size, b_size;
    int failed;  /* set by any chunk whose rows failed */
} binary_job;

static void binary_range(void *arg, int64_t begin, int64_t end) {
    binary_job *job = arg;
    ew_cursor c;
    cursor_start(&c, job->layout, 0, 2, begin);
    int32_t last = c.ndim - 1;
    ge_ew_loop2 loop = job->op->loops[(c.stride[0][last] == 0) << 1 | (c.stride[1][last] == 0)];
    int failed = 0;
    for (int64_t pos = begin; pos < end;) {
        int64_t n = cursor_row_left(&c);
        if (n > end - pos) {
            n = end - pos;
        }
        failed |= loop(job->out + pos * job->out_size, job->a + c.offset[0] * job->a_size,
                       job->b + c.offset[1] * job->b_size, n);
        pos += n;
        if (pos < end) {
            cursor_next_row(&c);
        }
    }
    if (failed) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
    }
}

static int run_binary(ge_context *ctx, const ge_ew_binary *op, const ew_layout *layout,
                      const ge_tensor *inputs, const ge_tensor *outputs) {
    if (check_dtype(ctx, op->op, "input", 0, &inputs[0], op->a_dtype)
        || check_dtype(ctx, op->op, "input", 1, &inputs[1], op->b_dtype)
        || check_dtype(ctx, op->op, "output", 0, &outputs[0], op->out_dtype)) {
        return -1;
    }
    if (layout->numel == 0) {
        return 0;
    }
    binary_job job = {op, layout, outputs[0].data, inputs[0].data, inputs[1].data,
                      ge_dtype_itemsize(op->out_dtype), ge_dtype_itemsize(op->a_dtype),
                      ge_dtype_itemsize(op->b_dtype), 0};
    run_range(ctx, layout->numel, op->grain, binary_range, &job);
    if (job.failed) {
        return ctx->set_error(ctx, "%s: %s", op->op, op->failure);
    }
    return 0;
}

/* A binary kernel whose blob is the layout alone (declared in elementwise.h). */
int ge_ew_binary_kernel(ge_context *ctx, const char *name, const ge_ew_binary *op,
                        const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                        int32_t n_outputs, const void *attrs, size_t attrs_size) {
    ew_layout layout;
    if (n_inputs != 2) {
        return ctx->set_error(ctx, "%s: expected 2 inputs, got %d", name, n_inputs);
    }
    if (read_layout(ctx, name, attrs, attrs_size, inputs, n_inputs, outputs, n_outputs, 0,
                    &layout)) {
        return -1;
    }
    return run_binary(ctx, op, &layout, inputs, outputs);
}

#define GE_F32 GE_FLOAT32
#define GE_F64 GE_FLOAT64
#define GE_I32 GE_INT32
#define GE_I64 GE_INT64

/* A kernel for a binary op with no attributes. */
#define EW_BINARY_KERNEL(SYMBOL, OP, LOOPS, A, B, OUT, GRAIN)                               \
    static const ge_ew_binary SYMBOL##_op = {OP, A, B, OUT, GRAIN, LOOPS, "a row failed"};     \
    GE_KERNEL(SYMBOL) {                                                                     \
        return ge_ew_binary_kernel(ctx, OP, &SYMBOL##_op, inputs, n_inputs, outputs, n_outputs,   \
                             attrs, attrs_size);                                            \
    }

#define EW_ARITHMETIC_KERNELS(SUFFIX, DTYPE)                                                   \
    EW_BINARY_KERNEL(ge_add_##SUFFIX, "Add", add_##SUFFIX##_loops, DTYPE, DTYPE, DTYPE,     \
                     EW_GRAIN_CHEAP)                                                          \
    EW_BINARY_KERNEL(ge_sub_##SUFFIX, "Sub", sub_##SUFFIX##_loops, DTYPE, DTYPE, DTYPE,     \
                     EW_GRAIN_CHEAP)                                                          \
    EW_BINARY_KERNEL(ge_mul_##SUFFIX, "Mul", mul_##SUFFIX##_loops, DTYPE, DTYPE, DTYPE,     \
                     EW_GRAIN_CHEAP)

EW_ARITHMETIC_KERNELS(f32, GE_F32)
EW_ARITHMETIC_KERNELS(f64, GE_F64)
EW_ARITHMETIC_KERNELS(i32, GE_I32)
EW_ARITHMETIC_KERNELS(i64, GE_I64)
EW_BINARY_KERNEL(ge_div_f32, "Div", div_f32_loops, GE_F32, GE_F32, GE_F32, EW_GRAIN_CHEAP)
EW_BINARY_KERNEL(ge_div_f64, "Div", div_f64_loops, GE_F64, GE_F64, GE_F64, EW_GRAIN_CHEAP)
EW_BINARY_KERNEL(ge_pow_f32_f32, "Pow", pow_f32_f32_loops, GE_F32, GE_F32, GE_F32,
                 EW_GRAIN_COSTLY)
EW_BINARY_KERNEL(ge_pow_f32_i32, "Pow", pow_f32_i32_loops, GE_F32, GE_I32, GE_F32,
                 EW_GRAIN_COSTLY)
EW_BINARY_KERNEL(ge_pow_f32_i64, "Pow", pow_f32_i64_loops, GE_F32, GE_I64, GE_F32,
                 EW_GRAIN_COSTLY)

#define EW_COMPARE_KERNELS(SUFFIX, DTYPE)                                                      \
    EW_BINARY_KERNEL(ge_equal_##SUFFIX, "Equal", equal_##SUFFIX##_loops, DTYPE, DTYPE,     \
                     GE_BOOL, EW_GRAIN_CHEAP)                                                 \
    EW_BINARY_KERNEL(ge_less_##SUFFIX, "Less", less_##SUFFIX##_loops, DTYPE, DTYPE,        \
                     GE_BOOL, EW_GRAIN_CHEAP)                                                 \
    EW_BINARY_KERNEL(ge_less_equal_##SUFFIX, "LessOrEqual", less_equal_##SUFFIX##_loops,   \
                     DTYPE, DTYPE, GE_BOOL, EW_GRAIN_CHEAP)                                   \
    EW_BINARY_KERNEL(ge_greater_##SUFFIX, "Greater", greater_##SUFFIX##_loops, DTYPE,      \
                     DTYPE, GE_BOOL, EW_GRAIN_CHEAP)                                          \
    EW_BINARY_KERNEL(ge_greater_equal_##SUFFIX, "GreaterOrEqual",                          \
                     greater_equal_##SUFFIX##_loops, DTYPE, DTYPE, GE_BOOL, EW_GRAIN_CHEAP)

EW_COMPARE_KERNELS(f32, GE_F32)
EW_COMPARE_KERNELS(f64, GE_F64)
EW_COMPARE_KERNELS(i32, GE_I32)
EW_COMPARE_KERNELS(i64, GE_I64)
EW_BINARY_KERNEL(ge_equal_bool, "Equal", equal_bool_loops, GE_BOOL, GE_BOOL, GE_BOOL,
                 EW_GRAIN_CHEAP)
EW_BINARY_KERNEL(ge_and_bool, "And", and_bool_loops, GE_BOOL, GE_BOOL, GE_BOOL,
                 EW_GRAIN_CHEAP)
EW_BINARY_KERNEL(ge_or_bool, "Or", or_bool_loops, GE_BOOL, GE_BOOL, GE_BOOL, EW_GRAIN_CHEAP)
EW_BINARY_KERNEL(ge_xor_bool, "Xor", xor_bool_loops, GE_BOOL, GE_BOOL, GE_BOOL,
                 EW_GRAIN_CHEAP)

/* Integer Div and Mod: one extra int for Mod, its fmod attribute. */
#define ZERO_DIVISOR "integer input 'B' contains a zero divisor"

#define EW_INTEGER_DIVISION_KERNELS(SUFFIX, DTYPE)                                              \
    static const ge_ew_binary div_##SUFFIX##_op = {"Div", DTYPE, DTYPE, DTYPE, EW_GRAIN_COSTLY,   \
                                                div_##SUFFIX##_loops, ZERO_DIVISOR};           \
    static const ge_ew_binary pymod_##SUFFIX##_op = {"Mod", DTYPE, DTYPE, DTYPE,                  \
                                                  EW_GRAIN_COSTLY, pymod_##SUFFIX##_loops,     \
                                                  ZERO_DIVISOR};                               \
    static const ge_ew_binary cmod_##SUFFIX##_op = {"Mod", DTYPE, DTYPE, DTYPE, EW_GRAIN_COSTLY,  \
                                                 cmod_##SUFFIX##_loops, ZERO_DIVISOR};         \
    GE_KERNEL(ge_div_##SUFFIX) {                                                               \
        return ge_ew_binary_kernel(ctx, "Div", &div_##SUFFIX##_op, inputs, n_inputs, outputs,        \
                             n_outputs, attrs, attrs_size);                                    \
    }                                                                                          \
    GE_KERNEL(ge_mod_##SUFFIX) {                                                               \
        return mod_kernel(ctx, &pymod_##SUFFIX##_op, &cmod_##SUFFIX##_op, inputs, n_inputs,    \
                          outputs, n_outputs, attrs, attrs_size);                              \
    }

/* Mod: the blob ends with fmod (0: sign of the divisor, 1: sign of the dividend); a NULL
 * op for a mode means the dtype does not allow it. */
static int mod_kernel(ge_context *ctx, const ge_ew_binary *floor_mod, const ge_ew_binary *trunc_mod,
                      const ge_tensor *inputs, int32_t n_inputs, const ge_tensor *outputs,
                      int32_t n_outputs, const void *attrs, size_t attrs_size) {
    ew_layout layout;
    if (n_inputs != 2) {
        return ctx->set_error(ctx, "Mod: expected 2 inputs, got %d", n_inputs);
    }
    if (read_layout(ctx, "Mod", attrs, attrs_size, inputs, n_inputs, outputs, n_outputs, 1,
                    &layout)) {
        return -1;
    }
    int64_t fmod = layout_extra(&layout, 0);
    const ge_ew_binary *op = fmod == 0 ? floor_mod : fmod == 1 ? trunc_mod : NULL;
    if (op == NULL) {
        return ctx->set_error(ctx, "Mod: attribute 'fmod' is %lld in the attribute blob, "
                              "which this kernel does not take", (long long)fmod);
    }
    return run_binary(ctx, op, &layout, inputs, outputs);
}

EW_INTEGER_DIVISION_KERNELS(i32, GE_I32)
EW_INTEGER_DIVISION_KERNELS(i64, GE_I64)

static const ge_ew_binary mod_f32_op = {"Mod", GE_F32, GE_F32, GE_F32, EW_GRAIN_COSTLY,
                                     mod_f32_loops, "a row failed"};
GE_KERNEL(ge_mod_f32) {
    /* Float Mod is fmod=1 only (the schema rejects fmod=0 for floats). */
    return mod_kernel(ctx, NULL, &mod_f32_op, inputs, n_inputs, outputs, n_outputs, attrs,
                      attrs_size);
}

/* BitShift: the blob ends with the direction (0: left, 1: right). */
static const ge_ew_binary shift_left_op = {"BitShift", GE_UINT8, GE_UINT8, GE_UINT8,
                                        EW_GRAIN_CHEAP, shift_left_u8_loops, "a row failed"};
static const ge_ew_binary shift_right_op = {"BitShift", GE_UINT8, GE_UINT8, GE_UINT8,
                                         EW_GRAIN_CHEAP, shift_right_u8_loops, "a row failed"};
GE_KERNEL(ge_bitshift_u8) {
    ew_layout layout;
    if (n_inputs != 2) {
        return ctx->set_error(ctx, "BitShift: expected 2 inputs, got %d", n_inputs);
    }
    if (read_layout(ctx, "BitShift", attrs, attrs_size, inputs, n_inputs, outputs, n_outputs,
                    1, &layout)) {
        return -1;
    }
    int64_t direction = layout_extra(&layout, 0);
    if (direction != 0 && direction != 1) {
        return ctx->set_error(ctx, "BitShift: direction %lld in the attribute blob, expected "
                              "0 (left) or 1 (right)", (long long)direction);
    }
    return run_binary(ctx, direction == 0 ? &shift_left_op : &shift_right_op, &layout, inputs,
                      outputs);
}

/* -- variadic ops: Sum, Mean, Max, Min ----------------------------------------------------- */

/* Fold one row of an operand into the block accumulator (`first`: set it instead), with
 * the operand advancing (stride 1) or fixed (stride 0). */
typedef void (*ew_fold)(void *acc, const void *x, int64_t n, int64_t stride, int first);
/* Write the accumulator of n elements to the output; k is the operand count. */
typedef void (*ew_finish)(void *out, const void *acc, int64_t n, int64_t k);

#define EW_FOLD(NAME, T, ACC, COMBINE)                                                     \
    static void NAME##_fold(void *acc_, const void *x_, int64_t n, int64_t stride,        \
                            int first) {                                                  \
        ACC *acc = acc_;                                                                  \
        const T *x = x_;                                                                  \
        if (first && stride) {                                                            \
            for (int64_t i = 0; i < n; i++) acc[i] = (ACC)x[i];                           \
        } else if (first) {                                                               \
            for (int64_t i = 0; i < n; i++) acc[i] = (ACC)x[0];                           \
        } else if (stride) {                                                              \
            for (int64_t i = 0; i < n; i++) acc[i] = COMBINE(acc[i], (ACC)x[i]);          \
        } else {                                                                          \
            const ACC y = (ACC)x[0];                                                      \
            for (int64_t i = 0; i < n; i++) acc[i] = COMBINE(acc[i], y);                  \
        }                                                                                 \
    }

#define ADD(x, y) ((x) + (y))
#define MAX_INT(x, y) ((x) > (y) ? (x) : (y))
#define MIN_INT(x, y) ((x) < (y) ? (x) : (y))

EW_FOLD(sum_f32, float, double, ADD)
EW_FOLD(max_f32, float, float, max_f32)
EW_FOLD(min_f32, float, float, min_f32)
EW_FOLD(max_i32, int32_t, int32_t, MAX_INT)
EW_FOLD(min_i32, int32_t, int32_t, MIN_INT)
EW_FOLD(max_i64, int64_t, int64_t, MAX_INT)
EW_FOLD(min_i64, int64_t, int64_t, MIN_INT)

static void sum_f32_finish(void *out_, const void *acc_, int64_t n, int64_t k) {
    float *out = out_;
    const double *acc = acc_;
    (void)k;
    for (int64_t i = 0; i < n; i++) out[i] = (float)acc[i];
}

static void mean_f32_finish(void *out_, const void *acc_, int64_t n, int64_t k) {
    float *out = out_;
    const double *acc = acc_;
    const double count = (double)k;  /* divided, not multiplied by 1/k: the reference's rounding */
    for (int64_t i = 0; i < n; i++) out[i] = (float)(acc[i] / count);
}

#define EW_COPY_FINISH(NAME, T)                                                             \
    static void NAME##_finish(void *out, const void *acc, int64_t n, int64_t k) {          \
        (void)k;                                                                           \
        memcpy(out, acc, (size_t)n * sizeof(T));                                           \
    }
EW_COPY_FINISH(max_f32, float)
EW_COPY_FINISH(min_f32, float)
EW_COPY_FINISH(max_i32, int32_t)
EW_COPY_FINISH(min_i32, int32_t)
EW_COPY_FINISH(max_i64, int64_t)
EW_COPY_FINISH(min_i64, int64_t)

typedef struct {
    const char *op;
    int32_t dtype;
    size_t acc_size;      /* bytes per accumulator element, at most 8 */
    ew_fold fold;
    ew_finish finish;
    const ge_ew_binary *pair; /* the binary op that gives the same result for two inputs */
} ew_variadic;

typedef struct {
    const ew_variadic *op;
    const ew_layout *layout;
    const ge_tensor *inputs;
    char *out;
} variadic_job;

/* Blocks of the output: every operand is folded into the block before the block is
 * written, so the output may share memory with any input of its size. */
static void variadic_range(void *arg, int64_t begin, int64_t end) {
    const variadic_job *job = arg;
    const ew_variadic *op = job->op;
    size_t item = ge_dtype_itemsize(op->dtype);
    _Alignas(64) unsigned char acc[EW_BLOCK * 8];
    for (int64_t block = begin; block < end; block += EW_BLOCK) {
        int64_t n = end - block < EW_BLOCK ? end - block : EW_BLOCK;
        for (int32_t j = 0; j < job->layout->n_operands; j++) {
            ew_cursor c;
            cursor_start(&c, job->layout, j, 1, block);
            int64_t stride = c.stride[0][c.ndim - 1];
            const char *x = job->inputs[j].data;
            for (int64_t done = 0; done < n;) {
                int64_t len = cursor_row_left(&c);
                if (len > n - done) {
                    len = n - done;
                }
                op->fold(acc + done * op->acc_size, x + c.offset[0] * item, len, stride,
                         j == 0);
                done += len;
                if (done < n) {
                    cursor_next_row(&c);
                }
            }
        }
        op->finish(job->out + block * item, acc, n, job->layout->n_operands);
    }
}

static int variadic_kernel(ge_context *ctx, const ew_variadic *op, const ge_tensor *inputs,
                           int32_t n_inputs, const ge_tensor *outputs, int32_t n_outputs,
                           const void *attrs, size_t attrs_size) {
    ew_layout layout;
    if (n_inputs < 1) {
        return ctx->set_error(ctx, "%s: expected at least 1 input, got %d", op->op, n_inputs);
    }
    if (read_layout(ctx, op->op, attrs, attrs_size, inputs, n_inputs, outputs, n_outputs, 0,
                    &layout)) {
        return -1;
    }
    if (n_inputs == 2 && op->pair != NULL) {
        return run_binary(ctx, op->pair, &layout, inputs, outputs);
    }
    for (int32_t i = 0; i < n_inputs; i++) {
        if (check_dtype(ctx, op->op, "input", i, &inputs[i], op->dtype)) {
            return -1;
        }
    }
    if (check_dtype(ctx, op->op, "output", 0, &outputs[0], op->dtype)) {
        return -1;
    }
    if (layout.numel == 0) {
        return 0;
    }
    variadic_job job = {op, &layout, inputs, outputs[0].data};
    run_range(ctx, layout.numel, EW_GRAIN_CHEAP / n_inputs + EW_BLOCK, variadic_range, &job);
    return 0;
}

#define EW_VARIADIC_KERNEL(SYMBOL, OP, FOLD, FINISH, DTYPE, ACC, PAIR)                     \
    static const ew_variadic SYMBOL##_op = {OP, DTYPE, sizeof(ACC), FOLD##_fold,           \
                                            FINISH##_finish, PAIR};                        \
    GE_KERNEL(SYMBOL) {                                                                    \
        return variadic_kernel(ctx, &SYMBOL##_op, inputs, n_inputs, outputs, n_outputs,    \
                               attrs, attrs_size);                                         \
    }

#define EW_PAIR(NAME, OP, DTYPE, LOOPS)                                                   \
    static const ge_ew_binary NAME = {OP, DTYPE, DTYPE, DTYPE, EW_GRAIN_CHEAP, LOOPS,        \
                                   "a row failed"};
EW_PAIR(ge_max_f32_pair, "Max", GE_F32, max_f32_loops)
EW_PAIR(ge_min_f32_pair, "Min", GE_F32, min_f32_loops)
EW_PAIR(ge_max_i32_pair, "Max", GE_I32, max_i32_loops)
EW_PAIR(ge_min_i32_pair, "Min", GE_I32, min_i32_loops)
EW_PAIR(ge_max_i64_pair, "Max", GE_I64, max_i64_loops)
EW_PAIR(ge_min_i64_pair, "Min", GE_I64, min_i64_loops)
EW_PAIR(ge_sum_f32_pair, "Sum", GE_F32, add_f32_loops)

/* Two inputs take the binary loops: Max, Min and a float sum of two are exact either way
 * (double rounding of a sum is harmless), while Mean always divides in double. */
EW_VARIADIC_KERNEL(ge_max_f32, "Max", max_f32, max_f32, GE_F32, float, &ge_max_f32_pair)
EW_VARIADIC_KERNEL(ge_min_f32, "Min", min_f32, min_f32, GE_F32, float, &ge_min_f32_pair)
EW_VARIADIC_KERNEL(ge_max_i32, "Max", max_i32, max_i32, GE_I32, int32_t, &ge_max_i32_pair)
EW_VARIADIC_KERNEL(ge_min_i32, "Min", min_i32, min_i32, GE_I32, int32_t, &ge_min_i32_pair)
EW_VARIADIC_KERNEL(ge_max_i64, "Max", max_i64, max_i64, GE_I64, int64_t, &ge_max_i64_pair)
EW_VARIADIC_KERNEL(ge_min_i64, "Min", min_i64, min_i64, GE_I64, int64_t, &ge_min_i64_pair)
EW_VARIADIC_KERNEL(ge_sum_f32, "Sum", sum_f32, sum_f32, GE_F32, double, &ge_sum_f32_pair)
EW_VARIADIC_KERNEL(ge_mean_f32, "Mean", sum_f32, mean_f32, GE_F32, double, NULL)

/* -- Not --------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *in;
    uint8_t *out;
} not_job;

static void not_range(void *arg, int64_t begin, int64_t end) {
    const not_job *job = arg;
    for (int64_t i = begin; i < end; i++) {
        job->out[i] = job->in[i] == 0;
    }
}

GE_KERNEL(ge_not_bool) {
    (void)attrs;
    (void)attrs_size;
    if (n_inputs != 1 || n_outputs != 1) {
        return ctx->set_error(ctx, "Not: expected 1 input and 1 output, got %d and %d",
                              n_inputs, n_outputs);
    }
    if (check_dtype(ctx, "Not", "input", 0, &inputs[0], GE_BOOL)
        || check_dtype(ctx, "Not", "output", 0, &outputs[0], GE_BOOL)) {
        return -1;
    }
    if (inputs[0].numel != outputs[0].numel || inputs[0].data == NULL) {
        return ctx->set_error(ctx, "Not: input 0 has %lld elements, the output %lld",
                              (long long)inputs[0].numel, (long long)outputs[0].numel);
    }
    not_job job = {inputs[0].data, outputs[0].data};
    run_range(ctx, outputs[0].numel, EW_GRAIN_CHEAP, not_range, &job);
    return 0;
}

/* -- Where --------------------------------------------------------------------------------- */

/* One row of Where, for one element width; s* are the operands' strides (0 or 1). */
typedef void (*ew_where_loop)(void *out, const uint8_t *cond, const void *x, const void *y,
                              int64_t n, int64_t sc, int64_t sx, int64_t sy);

#define EW_WHERE_LOOP(T)                                                                   \
    static void where_##T(void *out_, const uint8_t *cond, const void *x_, const void *y_, \
                          int64_t n, int64_t sc, int64_t sx, int64_t sy) {                 \
        T *out = out_;                                                                     \
        const T *x = x_, *y = y_;                                                          \
        if (sc && sx && sy) {                                                              \
            for (int64_t i = 0; i < n; i++) out[i] = cond[i] ? x[i] : y[i];                \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) out[i] = cond[i * sc] ? x[i * sx] : y[i * sy]; \
        }                                                                                  \
    }
EW_WHERE_LOOP(uint8_t)
EW_WHERE_LOOP(uint16_t)
EW_WHERE_LOOP(uint32_t)
EW_WHERE_LOOP(uint64_t)

typedef struct {
    const ew_layout *layout;
    ew_where_loop loop;
    size_t item;
    char *out;
    const uint8_t *cond;
    const char *x, *y;
} where_job;

static void where_range(void *arg, int64_t begin, int64_t end) {
    const where_job *job = arg;
    ew_cursor c;
    cursor_start(&c, job->layout, 0, 3, begin);
    int32_t last = c.ndim - 1;
    for (int64_t pos = begin; pos < end;) {
        int64_t n = cursor_row_left(&c);
        if (n > end - pos) {
            n = end - pos;
        }
        job->loop(job->out + pos * job->item, job->cond + c.offset[0],
                  job->x + c.offset[1] * job->item, job->y + c.offset[2] * job->item, n,
                  c.stride[0][last], c.stride[1][last], c.stride[2][last]);
        pos += n;
        if (pos < end) {
            cursor_next_row(&c);
        }
    }
}

/* Values of any dtype: Where only moves elements, so it copies them by width. */
GE_KERNEL(ge_where) {
    ew_layout layout;
    if (n_inputs != 3) {
        return ctx->set_error(ctx, "Where: expected 3 inputs, got %d", n_inputs);
    }
    if (read_layout(ctx, "Where", attrs, attrs_size, inputs, n_inputs, outputs, n_outputs, 0,
                    &layout)) {
        return -1;
    }
    int32_t dtype = outputs[0].dtype;
    if (check_dtype(ctx, "Where", "input", 0, &inputs[0], GE_BOOL)
        || check_dtype(ctx, "Where", "input", 1, &inputs[1], dtype)
        || check_dtype(ctx, "Where", "input", 2, &inputs[2], dtype)) {
        return -1;
    }
    size_t item = ge_dtype_itemsize(dtype);
    ew_where_loop loop = item == 1 ? where_uint8_t : item == 2 ? where_uint16_t
                       : item == 4 ? where_uint32_t : item == 8 ? where_uint64_t : NULL;
    if (loop == NULL) {
        return ctx->set_error(ctx, "Where: output dtype code %d is not one this kernel copies",
                              dtype);
    }
    if (layout.numel == 0) {
        return 0;
    }
    where_job job = {&layout, loop, item, outputs[0].data, inputs[0].data, inputs[1].data,
                     inputs[2].data};
    run_range(ctx, layout.numel, EW_GRAIN_CHEAP, where_range, &job);
    return 0;
}
