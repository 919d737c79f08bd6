/*
 * ge-hub attribute blobs: the one reader every built-in kernel uses, and plugin kernels
 * may use too (installed beside kernel.h as ge_hub/include/ge_hub/blob.h).
 *
 * A kernel's attribute blob is written once, at compile time, by its Python-side packer
 * and handed to every call of the kernel as (attrs, attrs_size). The writer is
 * `ge_hub.kernels.base.pack_values(ints, floats)`: int64 values, then float64 values,
 * native byte order, 8 bytes each, no header and no padding. Every packer runs through
 * `ge_hub.kernels.bounds.pack_checked`, which refuses (naming the node) a value that
 * does not fit an int64 slot. Which values come in which order is the contract between
 * one packer and one kernel, written at the top of the kernel's C file (or its family
 * header) and in the packer's docstring.
 *
 * The bytes carry no alignment promise, so values are copied out with memcpy (a plain
 * load once compiled). The reader never reads past the blob: a read past the end yields
 * 0 and clears `ok`, so a kernel reads all it needs, then checks once:
 *
 *     ge_blob blob = ge_blob_open(attrs, attrs_size);
 *     int64_t n = ge_blob_int(&blob);
 *     double alpha = ge_blob_float(&blob);
 *     int64_t dims[GE_MAX_RANK];
 *     ge_blob_ints_capped(&blob, dims, n, GE_MAX_RANK);
 *     if (!ge_blob_done(&blob)) {
 *         return ctx->set_error(ctx, "my_kernel: malformed attribute blob (%zu bytes)",
 *                               attrs_size);
 *     }
 *
 * A blob that is truncated, padded, or whose counts disagree with its length is thus an
 * error message, never a wild read. Only C99 and <string.h>: it compiles as C or C++.
 */
#ifndef GE_HUB_BLOB_H
#define GE_HUB_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes per blob value: every int and every float takes one 8-byte slot. */
#define GE_BLOB_SLOT 8

/* A cursor over an attribute blob; `ok` drops to 0 once a read fails. */
typedef struct {
    const unsigned char *data;
    size_t size;  /* bytes */
    size_t pos;   /* bytes consumed */
    int ok;
} ge_blob;

static inline ge_blob ge_blob_open(const void *attrs, size_t size) {
    ge_blob blob;
    blob.data = (const unsigned char *)attrs;
    blob.size = size;
    blob.pos = 0;
    blob.ok = attrs != NULL || size == 0;
    return blob;
}

/* Values (8-byte slots) not yet read. */
static inline int64_t ge_blob_left(const ge_blob *blob) {
    return blob->ok ? (int64_t)((blob->size - blob->pos) / GE_BLOB_SLOT) : 0;
}

/* Consumes the next `count` values and returns their address (for ge_blob_load_int and
 * ge_blob_load_float), or NULL, clearing `ok`, when fewer are left or count < 0. */
static inline const unsigned char *ge_blob_take(ge_blob *blob, int64_t count) {
    if (!blob->ok || count < 0 || (uint64_t)count > (blob->size - blob->pos) / GE_BLOB_SLOT) {
        blob->ok = 0;
        return NULL;
    }
    const unsigned char *at = blob->data + blob->pos;
    blob->pos += (size_t)count * GE_BLOB_SLOT;
    return at;
}

/* Value i of a run that ge_blob_take returned (i within the count taken). */
static inline int64_t ge_blob_load_int(const void *values, int64_t i) {
    int64_t v;
    memcpy(&v, (const unsigned char *)values + i * GE_BLOB_SLOT, sizeof v);
    return v;
}

static inline double ge_blob_load_float(const void *values, int64_t i) {
    double v;
    memcpy(&v, (const unsigned char *)values + i * GE_BLOB_SLOT, sizeof v);
    return v;
}

/* The next value as an int64 (a float64); 0 past the end. */
static inline int64_t ge_blob_int(ge_blob *blob) {
    const unsigned char *at = ge_blob_take(blob, 1);
    return at ? ge_blob_load_int(at, 0) : 0;
}

static inline double ge_blob_float(ge_blob *blob) {
    const unsigned char *at = ge_blob_take(blob, 1);
    return at ? ge_blob_load_float(at, 0) : 0.0;
}

/* The next value, which must lie in [lo, hi]; otherwise `ok` is cleared. */
static inline int64_t ge_blob_int_in(ge_blob *blob, int64_t lo, int64_t hi) {
    int64_t v = ge_blob_int(blob);
    if (v < lo || v > hi) {
        blob->ok = 0;
    }
    return v;
}

/* Reads `count` int64 values into `out`; returns `ok` (0, leaving `out` alone, when the
 * blob is too short). */
static inline int ge_blob_ints(ge_blob *blob, int64_t *out, int64_t count) {
    const unsigned char *at = ge_blob_take(blob, count);
    if (at != NULL && count > 0) {
        memcpy(out, at, (size_t)count * GE_BLOB_SLOT);
    }
    return blob->ok;
}

/* ge_blob_ints into a buffer with room for `capacity` values: a count (read from the
 * blob itself) past the room clears `ok` instead of overflowing `out`. */
static inline int ge_blob_ints_capped(ge_blob *blob, int64_t *out, int64_t count,
                                      int64_t capacity) {
    if (count < 0 || count > capacity) {
        blob->ok = 0;
        return 0;
    }
    return ge_blob_ints(blob, out, count);
}

/* ge_blob_ints where every value must lie in [lo, hi]. */
static inline int ge_blob_ints_in(ge_blob *blob, int64_t *out, int64_t count, int64_t lo,
                                  int64_t hi) {
    if (!ge_blob_ints(blob, out, count)) {
        return 0;
    }
    for (int64_t i = 0; i < count; i++) {
        if (out[i] < lo || out[i] > hi) {
            blob->ok = 0;
        }
    }
    return blob->ok;
}

/* Reads `count` float64 values into `out`; returns `ok`. */
static inline int ge_blob_floats(ge_blob *blob, double *out, int64_t count) {
    const unsigned char *at = ge_blob_take(blob, count);
    if (at != NULL && count > 0) {
        memcpy(out, at, (size_t)count * GE_BLOB_SLOT);
    }
    return blob->ok;
}

/* The blob was read exactly to its end, with nothing missing or left over. */
static inline int ge_blob_done(const ge_blob *blob) {
    return blob->ok && blob->pos == blob->size;
}

/*
 * Sizes computed from blob values. A blob comes from the packer, or from an offline model
 * file that may have been edited under a valid checksum: a kernel must assume nothing of
 * its values. Every size it compares with a tensor (elements, spans, scratch) is computed
 * with these, so that no product wraps around to a small number that passes the check
 * and then indexes far outside the tensor. Sizes are at most GE_MAX_SIZE (2^40, the
 * MAX_ELEMENTS of ge_hub/ops/limits.py: the largest tensor ge-hub plans); -1 means "not
 * a size" and stays -1 through further products and sums.
 */
#define GE_MAX_SIZE ((int64_t)1 << 40)

static inline int64_t ge_size_mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0 || a > GE_MAX_SIZE || b > GE_MAX_SIZE) {
        return -1;
    }
    return (b != 0 && a > GE_MAX_SIZE / b) ? -1 : a * b;
}

static inline int64_t ge_size_add(int64_t a, int64_t b) {
    if (a < 0 || b < 0 || a > GE_MAX_SIZE || b > GE_MAX_SIZE || a + b > GE_MAX_SIZE) {
        return -1;
    }
    return a + b;
}

/*
 * Fixed records. A blob that is always the same named fields (ints first, then floats, as
 * pack_values writes them) is declared once, as a field list, and the struct and its
 * reader are derived from it:
 *
 *     #define MY_BLOB(INT, FLOAT) INT(n) INT(channels) FLOAT(alpha)
 *     GE_BLOB_RECORD(my_blob, MY_BLOB)
 *
 * defines `typedef struct { int64_t n; int64_t channels; double alpha; } my_blob;` and
 * `int my_blob_read(const void *attrs, size_t size, my_blob *out)`, which fills `out` and
 * returns 1 when the blob is exactly that record (0 when it is shorter or longer). Ranges
 * stay the kernel's to check. The packer names the same fields in the same order with
 * `ge_hub.kernels.base.BlobRecord`; for the built-in kernels tests/test_blob_records.py
 * reads each list here and checks it against the Python declaration.
 */
#define GE_BLOB_INT_FIELD(name) int64_t name;
#define GE_BLOB_FLOAT_FIELD(name) double name;
#define GE_BLOB_READ_INT_FIELD(name) out->name = ge_blob_int(&blob);
#define GE_BLOB_READ_FLOAT_FIELD(name) out->name = ge_blob_float(&blob);
#define GE_BLOB_RECORD(type, FIELDS)                                                    \
    typedef struct {                                                                    \
        FIELDS(GE_BLOB_INT_FIELD, GE_BLOB_FLOAT_FIELD)                                  \
    } type;                                                                             \
    static inline int type##_read(const void *attrs, size_t size, type *out) {          \
        ge_blob blob = ge_blob_open(attrs, size);                                       \
        FIELDS(GE_BLOB_READ_INT_FIELD, GE_BLOB_READ_FLOAT_FIELD)                        \
        return ge_blob_done(&blob);                                                     \
    }

#ifdef __cplusplus
}
#endif

#endif /* GE_HUB_BLOB_H */
