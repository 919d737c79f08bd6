/*
 * ge_hub._core: the CPython binding of the C executor; the only file that sees Python.
 *
 * It turns the plain data ge_hub/executor.py derives from a Plan into a validated
 * ge_plan (executor.h), runs it with the GIL released (taken back only around Python
 * kernels), and turns failures into exceptions: bad plan data raises TypeError or
 * ValueError at construction, bad buffers raise ValueError naming the input or output,
 * and a failing kernel raises KernelError naming the step's node and op.
 *
 * Multi-phase initialization (PEP 489) with per-module state; METH_FASTCALL for run().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/closure.h"
#include "../kernels/kernels.h"
#include "blas.h"
#include "checksum.h"
#include "executor.h"
#include "threadpool.h"

enum { KIND_C = 0, KIND_PYTHON = 1 };

/* Where an empty buffer's data points when its exporter gives NULL. */
static max_align_t empty_buffer;

typedef struct {
    PyTypeObject *executor_type;
    PyTypeObject *step_buffer_type;
    PyObject *kernel_error;
} module_state;

typedef struct {
    PyObject_HEAD
    ge_plan *plan;
    Py_buffer *constants;    /* the constants' buffers, held for the executor's life */
    Py_ssize_t n_constants_held;
    PyObject *py_kernels;    /* tuple of the Python steps' callables */
    PyObject *subplans;      /* tuple of the Executors of control steps' bodies */
} ExecutorObject;

static module_state *state_of_type(PyTypeObject *type) {
    return (module_state *)PyType_GetModuleState(type);
}

/* -- error helpers ------------------------------------------------------------------------ */

/* The exception now set (normalized, with its traceback), taken out; NULL if none. */
static PyObject *take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
#endif
}

/* Raises `type` with a formatted message, chaining the exception now set as its cause. */
static void raise_from_current(PyObject *type, const char *fmt, ...) {
    PyObject *cause = take_exception();

    va_list args;
    va_start(args, fmt);
    PyObject *message = PyUnicode_FromFormatV(fmt, args);
    va_end(args);
    PyObject *error = message ? PyObject_CallOneArg(type, message) : NULL;
    Py_XDECREF(message);
    if (error == NULL) {
        Py_XDECREF(cause);
        return;
    }
    if (cause != NULL) {
        PyException_SetContext(error, Py_NewRef(cause));
        PyException_SetCause(error, cause);  /* steals */
    }
    PyErr_SetObject(type, error);
    Py_DECREF(error);
}

/* -- reading plan data -------------------------------------------------------------------- */

/* An int (anything with __index__) as int64; on failure raises TypeError naming `what`. */
static int read_int64(PyObject *value, int64_t *out, const char *what, Py_ssize_t which,
                      const char *field) {
    PyObject *index = PyNumber_Index(value);
    if (index != NULL) {
        long long result = PyLong_AsLongLong(index);
        Py_DECREF(index);
        if (!(result == -1 && PyErr_Occurred())) {
            *out = (int64_t)result;
            return 0;
        }
    }
    raise_from_current(PyExc_TypeError, "%s %zd: %s must be a 64-bit int, got %.200R", what,
                       which, field, value);
    return -1;
}

static int read_int32(PyObject *value, int32_t *out, const char *what, Py_ssize_t which,
                      const char *field) {
    int64_t wide;
    if (read_int64(value, &wide, what, which, field) != 0) {
        return -1;
    }
    if (wide < INT32_MIN || wide > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s %zd: %s %lld is out of range", what, which, field,
                     (long long)wide);
        return -1;
    }
    *out = (int32_t)wide;
    return 0;
}

/* A sequence of exactly `n` items, as a new reference from PySequence_Fast. */
static PyObject *fixed_sequence(PyObject *value, Py_ssize_t n, const char *what,
                                Py_ssize_t which, const char *layout) {
    PyObject *seq = PySequence_Fast(value, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s %zd must be a tuple %s, got %.200R", what, which,
                     layout, value);
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s %zd must have %zd items %s, got %zd", what, which,
                     n, layout, PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    return seq;
}

static PyObject *any_sequence(PyObject *value, const char *name) {
    PyObject *seq = PySequence_Fast(value, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a sequence, got %.200R", name, value);
        return NULL;
    }
    if (PySequence_Fast_GET_SIZE(seq) > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s has too many items", name);
        Py_DECREF(seq);
        return NULL;
    }
    return seq;
}

#define TENSOR_LAYOUT "(dtype, shape, storage, offset, index)"

static int read_tensor(ge_tensor_spec *spec, PyObject *value, Py_ssize_t t) {
    PyObject *seq = fixed_sequence(value, 5, "tensor", t, TENSOR_LAYOUT);
    if (seq == NULL) {
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int status = -1;
    PyObject *shape = NULL;
    if (read_int32(items[0], &spec->dtype, "tensor", t, "dtype") != 0
        || read_int32(items[2], &spec->storage, "tensor", t, "storage") != 0
        || read_int64(items[3], &spec->offset, "tensor", t, "offset") != 0
        || read_int32(items[4], &spec->index, "tensor", t, "index") != 0) {
        goto done;
    }
    shape = PySequence_Fast(items[1], "");
    if (shape == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "tensor %zd: shape must be a sequence of ints, got %.200R",
                     t, items[1]);
        goto done;
    }
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(shape);
    if (ndim > GE_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "tensor %zd: rank %zd exceeds the executor's limit %d", t,
                     ndim, GE_MAX_RANK);
        goto done;
    }
    spec->ndim = (int32_t)ndim;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        if (read_int64(PySequence_Fast_GET_ITEM(shape, d), &spec->shape[d], "tensor", t,
                       "a dimension") != 0) {
            goto done;
        }
    }
    status = 0;
done:
    Py_XDECREF(shape);
    Py_DECREF(seq);
    return status;
}

static char *copy_text(PyObject *value, Py_ssize_t s, const char *field) {
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "step %zd: %s must be a str, got %.200R", s, field, value);
        return NULL;
    }
    const char *text = PyUnicode_AsUTF8(value);
    if (text == NULL) {
        return NULL;
    }
    char *copy = strdup(text);
    if (copy == NULL) {
        PyErr_NoMemory();
    }
    return copy;
}

static int read_tensor_list(PyObject *value, int32_t *out, Py_ssize_t expected, Py_ssize_t s,
                            const char *field) {
    PyObject *seq = PySequence_Fast(value, "");
    if (seq == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < expected; i++) {
        if (read_int32(PySequence_Fast_GET_ITEM(seq, i), &out[i], "step", s, field) != 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static Py_ssize_t sequence_length(PyObject *value, Py_ssize_t s, const char *field) {
    Py_ssize_t n = PySequence_Check(value) && !PyUnicode_Check(value) ? PySequence_Size(value)
                                                                        : -1;
    if (n < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "step %zd: %s must be a sequence of tensor indices, got "
                     "%.200R", s, field, value);
    } else if (n > 65536) {
        PyErr_Format(PyExc_ValueError, "step %zd: too many %s (%zd)", s, field, n);
        n = -1;
    }
    return n;
}

#define STEP_LAYOUT \
    "(kind, kernel, inputs, outputs, attrs, scratch_offset, scratch_bytes, node, op[, " \
    "subplans])"

/* The attribute blob of a control step (closure.h): the header of its sub-plans' ge_plan
 * pointers, written here and nowhere else, then the packer's blob. */
static int control_attrs(ge_step_spec *step, PyObject *uses, PyObject *subplans,
                         Py_ssize_t s) {
    PyObject *seq = uses ? PySequence_Fast(uses, "") : PyTuple_New(0);
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "step %zd (node '%s'): subplans must be a sequence of "
                     "indices, got %.200R", s, step->node, uses);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int status = -1;
    size_t header = ge_control_header_bytes(n);
    unsigned char *blob = n <= 2 ? malloc(header + step->attrs_size) : NULL;
    if (n > 2) {
        PyErr_Format(PyExc_ValueError, "step %zd (node '%s'): %zd sub-plans, a control step "
                     "takes at most 2", s, step->node, n);
        goto done;
    }
    if (blob == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t magic = GE_CONTROL_MAGIC;
    int64_t count = (int64_t)n;
    memcpy(blob, &magic, 8);
    memcpy(blob + 8, &count, 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t which;
        if (read_int32(PySequence_Fast_GET_ITEM(seq, i), &which, "step", s, "sub-plan") != 0) {
            goto done;
        }
        if (which < 0 || which >= PyTuple_GET_SIZE(subplans)) {
            PyErr_Format(PyExc_ValueError, "step %zd (node '%s'): sub-plan %d is out of range "
                         "(%zd sub-plans)", s, step->node, which, PyTuple_GET_SIZE(subplans));
            goto done;
        }
        ExecutorObject *child = (ExecutorObject *)PyTuple_GET_ITEM(subplans, which);
        ge_plan *plan = child->plan;
        memcpy(blob + 16 + (size_t)i * sizeof(void *), &plan, sizeof(void *));
    }
    if (step->attrs_size > 0) {
        memcpy(blob + header, step->attrs, step->attrs_size);
        free(step->attrs);
    }
    step->attrs = blob;
    step->attrs_size += header;
    blob = NULL;
    status = 0;
done:
    free(blob);
    Py_DECREF(seq);
    return status;
}

static int read_step(ge_step_spec *step, PyObject *value, Py_ssize_t s, PyObject *subplans) {
    /* 9 items, or 10 with the sub-plans of a control step. */
    PyObject *probe = PySequence_Fast(value, "");
    Py_ssize_t n_items = probe != NULL ? PySequence_Fast_GET_SIZE(probe) : 9;
    Py_XDECREF(probe);
    PyErr_Clear();
    PyObject *seq = fixed_sequence(value, n_items == 10 ? 10 : 9, "step", s, STEP_LAYOUT);
    if (seq == NULL) {
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int status = -1;
    int32_t kind;
    /* The names first, so that later messages can use them. */
    if ((step->node = copy_text(items[7], s, "node")) == NULL
        || (step->op = copy_text(items[8], s, "op")) == NULL
        || read_int32(items[0], &kind, "step", s, "kind") != 0) {
        goto done;
    }
    if (kind == KIND_C) {
        if (!PyLong_Check(items[1])) {
            PyErr_Format(PyExc_TypeError, "step %zd (node '%s'): a C kernel must be given as its "
                         "function address (int), got %.200R", s, step->node, items[1]);
            goto done;
        }
        void *address = PyLong_AsVoidPtr(items[1]);
        if (address == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError, "step %zd (node '%s'): the C kernel address is 0",
                             s, step->node);
            }
            goto done;
        }
        step->fn = (ge_kernel_fn)address;
        step->py_index = -1;
    } else if (kind == KIND_PYTHON) {
        if (read_int32(items[1], &step->py_index, "step", s, "Python kernel index") != 0) {
            goto done;
        }
    } else {
        PyErr_Format(PyExc_ValueError, "step %zd (node '%s'): unknown kernel kind %d (expected "
                     "%d for C or %d for Python)", s, step->node, kind, KIND_C, KIND_PYTHON);
        goto done;
    }

    Py_ssize_t n_inputs = sequence_length(items[2], s, "inputs");
    Py_ssize_t n_outputs = n_inputs < 0 ? -1 : sequence_length(items[3], s, "outputs");
    if (n_outputs < 0) {
        goto done;
    }
    step->n_inputs = (int32_t)n_inputs;
    step->n_outputs = (int32_t)n_outputs;
    step->tensors = calloc((size_t)(n_inputs + n_outputs) + 1, sizeof(int32_t));
    if (step->tensors == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_tensor_list(items[2], step->tensors, n_inputs, s, "input tensor") != 0
        || read_tensor_list(items[3], step->tensors + n_inputs, n_outputs, s,
                            "output tensor") != 0) {
        goto done;
    }

    if (!PyBytes_Check(items[4])) {
        PyErr_Format(PyExc_TypeError, "step %zd (node '%s'): attrs must be bytes, got %.200R", s,
                     step->node, items[4]);
        goto done;
    }
    step->attrs_size = (size_t)PyBytes_GET_SIZE(items[4]);
    if (step->attrs_size == 0) {
        step->attrs = ge_empty_attrs();
    } else {
        /* A copy from malloc: aligned for the int64/float64 values blobs hold. */
        step->attrs = malloc(step->attrs_size);
        if (step->attrs == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(step->attrs, PyBytes_AS_STRING(items[4]), step->attrs_size);
    }
    if (read_int64(items[5], &step->scratch_offset, "step", s, "scratch_offset") != 0
        || read_int64(items[6], &step->scratch_bytes, "step", s, "scratch_bytes") != 0) {
        goto done;
    }
    PyObject *uses = PySequence_Fast_GET_SIZE(seq) == 10 ? items[9] : NULL;
    if (step->fn == (ge_kernel_fn)ge_control) {
        if (control_attrs(step, uses, subplans, s) != 0) {
            goto done;
        }
    } else if (uses != NULL && PyObject_IsTrue(uses)) {
        PyErr_Format(PyExc_ValueError, "step %zd (node '%s'): only the control kernel takes "
                     "sub-plans", s, step->node);
        goto done;
    }
    status = 0;
done:
    Py_DECREF(seq);
    return status;
}

static int read_sizes(PyObject *seq, int64_t *out, const char *what) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        if (read_int64(PySequence_Fast_GET_ITEM(seq, i), &out[i], what, i, "byte size") != 0) {
            return -1;
        }
    }
    return 0;
}

/* -- Executor ----------------------------------------------------------------------------- */

PyDoc_STRVAR(Executor_doc,
"Executor(tensors, steps, arena_bytes, constants, input_nbytes, output_nbytes, py_kernels=())\n"
"--\n\n"
"A validated plan, ready to run. tensors: (dtype, shape, storage, offset, index) each;\n"
"steps: (kind, kernel, inputs, outputs, attrs, scratch_offset, scratch_bytes, node, op)\n"
"each, kernel being a C function address (kind KIND_C) or an index into py_kernels\n"
"(KIND_PYTHON); constants: objects exporting the buffer protocol (kept alive);\n"
"input_nbytes/output_nbytes: the exact byte size of each graph input/output buffer.\n"
"A Python kernel is called as fn(inputs, outputs) with tuples of buffer objects (None\n"
"for an omitted input; wrap them with np.frombuffer); it must fill the outputs and keep\n"
"no array on any of them past the call.");

static void release_constants(ExecutorObject *self) {
    for (Py_ssize_t i = 0; i < self->n_constants_held; i++) {
        PyBuffer_Release(&self->constants[i]);
    }
    self->n_constants_held = 0;
    PyMem_Free(self->constants);
    self->constants = NULL;
}

static int build_plan(ExecutorObject *self, PyObject *tensors, PyObject *steps,
                      int64_t arena_bytes, PyObject *constants, PyObject *input_nbytes,
                      PyObject *output_nbytes) {
    Py_ssize_t n_constants = PySequence_Fast_GET_SIZE(constants);
    ge_plan *plan = ge_plan_new((int32_t)PySequence_Fast_GET_SIZE(tensors),
                                (int32_t)PySequence_Fast_GET_SIZE(steps),
                                (int32_t)PySequence_Fast_GET_SIZE(input_nbytes),
                                (int32_t)PySequence_Fast_GET_SIZE(output_nbytes),
                                (int32_t)n_constants);
    if (plan == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->plan = plan;
    plan->arena_bytes = arena_bytes;
    plan->n_python = (int32_t)PyTuple_GET_SIZE(self->py_kernels);

    self->constants = PyMem_Calloc((size_t)n_constants + 1, sizeof(Py_buffer));
    if (self->constants == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_constants; i++) {
        PyObject *constant = PySequence_Fast_GET_ITEM(constants, i);
        if (PyObject_GetBuffer(constant, &self->constants[i], PyBUF_SIMPLE) != 0) {
            raise_from_current(PyExc_TypeError, "constant %zd must be a C-contiguous buffer "
                               "(a NumPy array), got %.100s", i, Py_TYPE(constant)->tp_name);
            return -1;
        }
        self->n_constants_held = i + 1;
        plan->constant_nbytes[i] = (int64_t)self->constants[i].len;
        plan->constant_data[i] = self->constants[i].buf ? self->constants[i].buf
                                                        : (void *)&empty_buffer;
    }
    if (read_sizes(input_nbytes, plan->input_nbytes, "input") != 0
        || read_sizes(output_nbytes, plan->output_nbytes, "output") != 0) {
        return -1;
    }
    for (int32_t t = 0; t < plan->n_tensors; t++) {
        if (read_tensor(&plan->tensors[t], PySequence_Fast_GET_ITEM(tensors, t), t) != 0) {
            return -1;
        }
    }
    for (int32_t s = 0; s < plan->n_steps; s++) {
        if (read_step(&plan->steps[s], PySequence_Fast_GET_ITEM(steps, s), s,
                      self->subplans) != 0) {
            return -1;
        }
    }
    char error[512];
    if (ge_plan_validate(plan, error, sizeof error) != 0) {
        PyErr_Format(PyExc_ValueError, "invalid plan: %s", error);
        return -1;
    }
    return 0;
}

static PyObject *Executor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"tensors", "steps", "arena_bytes", "constants", "input_nbytes",
                               "output_nbytes", "py_kernels", "subplans", NULL};
    PyObject *tensors_arg, *steps_arg, *constants_arg, *inputs_arg, *outputs_arg;
    PyObject *py_kernels_arg = NULL, *subplans_arg = NULL;
    long long arena_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLOOO|OO:Executor", keywords, &tensors_arg,
                                     &steps_arg, &arena_bytes, &constants_arg, &inputs_arg,
                                     &outputs_arg, &py_kernels_arg, &subplans_arg)) {
        return NULL;
    }
    ExecutorObject *self = (ExecutorObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    PyObject *tensors = NULL, *steps = NULL, *constants = NULL, *inputs = NULL,
             *outputs = NULL;
    self->py_kernels = py_kernels_arg ? PySequence_Tuple(py_kernels_arg) : PyTuple_New(0);
    if (self->py_kernels == NULL) {
        goto fail;
    }
    self->subplans = subplans_arg ? PySequence_Tuple(subplans_arg) : PyTuple_New(0);
    if (self->subplans == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->subplans); i++) {
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(self->subplans, i), type)) {
            PyErr_Format(PyExc_TypeError, "subplans[%zd] is not an Executor: %.200R", i,
                         PyTuple_GET_ITEM(self->subplans, i));
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->py_kernels); i++) {
        if (!PyCallable_Check(PyTuple_GET_ITEM(self->py_kernels, i))) {
            PyErr_Format(PyExc_TypeError, "py_kernels[%zd] is not callable: %.200R", i,
                         PyTuple_GET_ITEM(self->py_kernels, i));
            goto fail;
        }
    }
    if ((tensors = any_sequence(tensors_arg, "tensors")) == NULL
        || (steps = any_sequence(steps_arg, "steps")) == NULL
        || (constants = any_sequence(constants_arg, "constants")) == NULL
        || (inputs = any_sequence(inputs_arg, "input_nbytes")) == NULL
        || (outputs = any_sequence(outputs_arg, "output_nbytes")) == NULL) {
        goto fail;
    }
    if (build_plan(self, tensors, steps, (int64_t)arena_bytes, constants, inputs, outputs)
        != 0) {
        goto fail;
    }
    Py_DECREF(tensors);
    Py_DECREF(steps);
    Py_DECREF(constants);
    Py_DECREF(inputs);
    Py_DECREF(outputs);
    return (PyObject *)self;
fail:
    Py_XDECREF(tensors);
    Py_XDECREF(steps);
    Py_XDECREF(constants);
    Py_XDECREF(inputs);
    Py_XDECREF(outputs);
    Py_DECREF(self);
    return NULL;
}

static int Executor_traverse(ExecutorObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->py_kernels);
    Py_VISIT(self->subplans);
    return 0;
}

static int Executor_clear(ExecutorObject *self) {
    Py_CLEAR(self->py_kernels);
    Py_CLEAR(self->subplans);
    return 0;
}

static void Executor_dealloc(ExecutorObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Executor_clear(self);
    release_constants(self);
    ge_plan_free(self->plan);
    self->plan = NULL;
    type->tp_free(self);
    Py_DECREF(type);
}

/* -- StepBuffer ---------------------------------------------------------------------------- */

/*
 * What a Python kernel gets for each input and output: a buffer-protocol object over the
 * tensor's memory (np.frombuffer(buffer, dtype) wraps it without a copy). It counts its
 * exports and is switched off when the step ends, so that no array can reach the arena
 * after the call, when the next step or run reuses it: a later np.frombuffer fails, and
 * an array still alive at the end of the step fails the step.
 */
typedef struct {
    PyObject_HEAD
    void *data;            /* NULL once the step is over */
    Py_ssize_t nbytes;
    int readonly;
    Py_ssize_t exports;
} StepBufferObject;

static int StepBuffer_getbuffer(StepBufferObject *self, Py_buffer *view, int flags) {
    if (self->data == NULL) {
        PyErr_SetString(PyExc_BufferError, "a kernel's buffers are valid only during its call");
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->nbytes, self->readonly,
                          flags) != 0) {
        return -1;
    }
    self->exports++;
    return 0;
}

static void StepBuffer_releasebuffer(StepBufferObject *self, Py_buffer *view) {
    self->exports--;
}

static void StepBuffer_dealloc(StepBufferObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyType_Slot StepBuffer_slots[] = {
    {Py_tp_doc, (void *)"The memory of one input or output of a Python kernel step, valid "
                        "during the call."},
    {Py_tp_dealloc, StepBuffer_dealloc},
    {Py_bf_getbuffer, StepBuffer_getbuffer},
    {Py_bf_releasebuffer, StepBuffer_releasebuffer},
    {0, NULL},
};

static PyType_Spec StepBuffer_spec = {
    .name = "ge_hub._core.StepBuffer",
    .basicsize = sizeof(StepBufferObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = StepBuffer_slots,
};

/* -- running ------------------------------------------------------------------------------ */

/* What the Python-step hook needs while the loop runs without the GIL. */
typedef struct {
    ExecutorObject *self;
    module_state *state;
    PyThreadState *thread;  /* saved while the GIL is released */
    PyObject *raised;       /* the exception a Python step raised, with its traceback */
    int kept_reference;     /* a Python step kept a reference to one of its buffers */
} python_call;

/* Makes the buffers for one side of a step: read-only inputs, writable outputs. */
static PyObject *step_buffers(python_call *call, const ge_run *run, int32_t first, int32_t n,
                             int readonly) {
    const ge_plan *plan = call->self->plan;
    PyObject *buffers = PyTuple_New(n);
    if (buffers == NULL) {
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        const ge_tensor *tensor = &run->slots[first + i];
        PyObject *item;
        if (tensor->data == NULL) {
            item = Py_NewRef(Py_None);
        } else {
            StepBufferObject *buffer = PyObject_New(StepBufferObject,
                                                    call->state->step_buffer_type);
            if (buffer == NULL) {
                Py_DECREF(buffers);
                return NULL;
            }
            buffer->data = tensor->data;
            buffer->nbytes = (Py_ssize_t)plan->tensors[plan->slot_tensor[first + i]].nbytes;
            buffer->readonly = readonly;
            buffer->exports = 0;
            item = (PyObject *)buffer;
        }
        PyTuple_SET_ITEM(buffers, i, item);
    }
    return buffers;
}

/* Switches a step's buffers off; 0 when no export of any outlives the call. */
/* Whether an array still sees one of `buffers`. */
static int buffers_exported(PyObject *buffers) {
    for (Py_ssize_t i = 0; buffers != NULL && i < PyTuple_GET_SIZE(buffers); i++) {
        PyObject *item = PyTuple_GET_ITEM(buffers, i);
        if (item != Py_None && ((StepBufferObject *)item)->exports != 0) {
            return 1;
        }
    }
    return 0;
}

/* Ends the buffers of one call; -1 when an array still sees one of them. A view that only a
   reference cycle keeps alive (an exception caught inside the kernel, whose traceback holds
   the kernel's frames and their arrays) is freed by a collection, so one runs before the
   kernel is blamed; it costs nothing in the usual case, where no view is left. */
static int end_buffers(PyObject *inputs, PyObject *outputs) {
    PyObject *both[2] = {inputs, outputs};
    for (int k = 0; k < 2; k++) {
        for (Py_ssize_t i = 0; both[k] != NULL && i < PyTuple_GET_SIZE(both[k]); i++) {
            PyObject *item = PyTuple_GET_ITEM(both[k], i);
            if (item != Py_None) {
                ((StepBufferObject *)item)->data = NULL;
            }
        }
    }
    if (!buffers_exported(inputs) && !buffers_exported(outputs)) {
        return 0;
    }
    PyGC_Collect();
    return buffers_exported(inputs) || buffers_exported(outputs) ? -1 : 0;
}

static int run_python_step(void *user, ge_run *run, int32_t s) {
    python_call *call = user;
    PyEval_RestoreThread(call->thread);
    const ge_step_spec *step = &call->self->plan->steps[s];
    PyObject *inputs = step_buffers(call, run, step->first_slot, step->n_inputs, 1);
    PyObject *outputs = inputs ? step_buffers(call, run, step->first_slot + step->n_inputs,
                                              step->n_outputs, 0)
                               : NULL;
    PyObject *result = NULL;
    if (outputs != NULL) {
        PyObject *args[2] = {inputs, outputs};
        result = PyObject_Vectorcall(PyTuple_GET_ITEM(call->self->py_kernels, step->py_index),
                                     args, 2, NULL);
    }
    int status = result != NULL ? 0 : -1;
    Py_XDECREF(result);
    if (status != 0) {
        call->raised = take_exception();
    }
    /* The arena is reused by the next step and run: nothing may still see it. */
    int ended = end_buffers(inputs, outputs) == 0;
    if (status == 0 && !ended) {
        call->kept_reference = 1;
        status = -1;
    }
    Py_XDECREF(inputs);
    Py_XDECREF(outputs);
    call->thread = PyEval_SaveThread();
    return status;
}

/* What the per-step hook of a traced run needs (see ge_run_trace): the observer callable. */
typedef struct {
    python_call *call;
    PyObject *observer;     /* called as observer(step, output_buffers); NULL: none */
} trace_call;

/* Shows the observer a step's outputs, as read-only buffers valid during the call. Takes
 * the GIL with PyGILState so that it works on whichever thread ran the step. */
static int observe_step(void *user, ge_run *run, int32_t s) {
    trace_call *trace = user;
    python_call *call = trace->call;
    PyGILState_STATE gil = PyGILState_Ensure();
    const ge_step_spec *step = &call->self->plan->steps[s];
    PyObject *outputs = step_buffers(call, run, step->first_slot + step->n_inputs,
                                     step->n_outputs, 1);
    PyObject *index = outputs ? PyLong_FromLong(s) : NULL;
    PyObject *result = NULL;
    if (index != NULL) {
        PyObject *args[2] = {index, outputs};
        result = PyObject_Vectorcall(trace->observer, args, 2, NULL);
    }
    int status = result != NULL ? 0 : -1;
    Py_XDECREF(result);
    Py_XDECREF(index);
    if (status != 0 && call->raised == NULL) {
        call->raised = take_exception();
    }
    if (end_buffers(NULL, outputs) != 0 && status == 0) {
        call->kept_reference = 1;
        status = -1;
    }
    Py_XDECREF(outputs);
    PyGILState_Release(gil);
    return status;
}

static void raise_step_failure(ExecutorObject *self, python_call *call, int32_t s,
                               const char *message) {
    const ge_step_spec *step = &self->plan->steps[s];
    PyObject *text;
    if (call->raised != NULL) {
        text = PyUnicode_FromFormat("node '%s' (op %s): the Python kernel raised %s: %S",
                                    step->node, step->op, Py_TYPE(call->raised)->tp_name,
                                    call->raised);
    } else if (call->kept_reference) {
        text = PyUnicode_FromFormat("node '%s' (op %s): the Python kernel kept a reference to "
                                    "one of its input or output buffers after returning",
                                    step->node, step->op);
    } else {
        text = PyUnicode_FromFormat("node '%s' (op %s): %s", step->node, step->op, message);
    }
    PyObject *error = text ? PyObject_CallOneArg(call->state->kernel_error, text) : NULL;
    Py_XDECREF(text);
    if (error != NULL) {
        PyObject *node = PyUnicode_FromString(step->node);
        PyObject *op = PyUnicode_FromString(step->op);
        if (node == NULL || op == NULL || PyObject_SetAttrString(error, "node", node) != 0
            || PyObject_SetAttrString(error, "op", op) != 0) {
            Py_CLEAR(error);
        }
        Py_XDECREF(node);
        Py_XDECREF(op);
    }
    if (error == NULL) {
        Py_CLEAR(call->raised);
        return;
    }
    if (call->raised != NULL) {
        PyException_SetContext(error, Py_NewRef(call->raised));
        PyException_SetCause(error, call->raised);  /* steals */
        call->raised = NULL;
    }
    PyErr_SetObject(call->state->kernel_error, error);
    Py_DECREF(error);
}

/* Gets the buffers of one side of run(); on failure releases what it got and raises. */
static int get_buffers(ExecutorObject *self, PyObject *seq, int32_t n, Py_buffer *views,
                       void **pointers, int writable) {
    const ge_plan *plan = self->plan;
    const char *what = writable ? "output" : "input";
    const int64_t *sizes = writable ? plan->output_nbytes : plan->input_nbytes;
    const int32_t *alignment = writable ? plan->output_alignment : plan->input_alignment;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int32_t i;
    for (i = 0; i < n; i++) {
        if (PyObject_GetBuffer(items[i], &views[i], writable ? PyBUF_WRITABLE : PyBUF_SIMPLE)
            != 0) {
            raise_from_current(PyExc_ValueError, "%s %d must be a C-contiguous%s buffer of %lld "
                               "bytes (a NumPy array), got %.100s", what, i,
                               writable ? ", writable" : "", (long long)sizes[i],
                               Py_TYPE(items[i])->tp_name);
            goto fail;
        }
        if ((int64_t)views[i].len != sizes[i]) {
            PyErr_Format(PyExc_ValueError, "%s %d has %zd bytes, expected %lld", what, i,
                         views[i].len, (long long)sizes[i]);
            i++;
            goto fail;
        }
        pointers[i] = views[i].buf ? views[i].buf : (void *)&empty_buffer;
        if ((uintptr_t)pointers[i] % (uintptr_t)alignment[i] != 0) {
            PyErr_Format(PyExc_ValueError, "%s %d is not aligned to %d bytes", what, i,
                         alignment[i]);
            i++;
            goto fail;
        }
    }
    return 0;
fail:
    while (i-- > 0) {
        PyBuffer_Release(&views[i]);
    }
    return -1;
}

#define STACK_BUFFERS 8

static PyObject *Executor_run(ExecutorObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 4) {
        PyErr_Format(PyExc_TypeError, "run() takes (inputs, outputs) and optionally records "
                     "and observer, got %zd arguments", nargs);
        return NULL;
    }
    ge_plan *plan = self->plan;
    /* The optional per-step hook: a records buffer and an observer callable. */
    PyObject *records_arg = nargs > 2 && args[2] != Py_None ? args[2] : NULL;
    PyObject *observer = nargs > 3 && args[3] != Py_None ? args[3] : NULL;
    Py_buffer records_view = {0};
    if (observer != NULL && !PyCallable_Check(observer)) {
        PyErr_Format(PyExc_TypeError, "run(): observer must be callable, got %.100s",
                     Py_TYPE(observer)->tp_name);
        return NULL;
    }
    if (records_arg != NULL) {
        if (PyObject_GetBuffer(records_arg, &records_view, PyBUF_WRITABLE) != 0) {
            return NULL;
        }
        Py_ssize_t need = (Py_ssize_t)plan->n_steps * (Py_ssize_t)sizeof(ge_step_record);
        if (records_view.len != need
            || (uintptr_t)records_view.buf % _Alignof(ge_step_record) != 0) {
            PyErr_Format(PyExc_ValueError, "run(): records must be an aligned, writable buffer "
                         "of %zd bytes (int64 [%d, 3]), got %zd bytes", need, plan->n_steps,
                         records_view.len);
            PyBuffer_Release(&records_view);
            return NULL;
        }
    }
    PyObject *inputs = PySequence_Fast(args[0], "run(): inputs must be a sequence");
    if (inputs == NULL) {
        if (records_arg != NULL) {
            PyBuffer_Release(&records_view);
        }
        return NULL;
    }
    PyObject *outputs = PySequence_Fast(args[1], "run(): outputs must be a sequence");
    if (outputs == NULL) {
        if (records_arg != NULL) {
            PyBuffer_Release(&records_view);
        }
        Py_DECREF(inputs);
        return NULL;
    }
    PyObject *result = NULL;
    Py_buffer stack_views[STACK_BUFFERS];
    void *stack_pointers[STACK_BUFFERS];
    Py_buffer *views = stack_views;
    void **pointers = stack_pointers;
    int32_t n_in = plan->n_inputs, n_out = plan->n_outputs;

    if (PySequence_Fast_GET_SIZE(inputs) != n_in || PySequence_Fast_GET_SIZE(outputs) != n_out) {
        PyErr_Format(PyExc_ValueError, "run(): expected %d inputs and %d outputs, got %zd and %zd",
                     n_in, n_out, PySequence_Fast_GET_SIZE(inputs),
                     PySequence_Fast_GET_SIZE(outputs));
        goto done;
    }
    if (n_in + n_out > STACK_BUFFERS) {
        views = PyMem_Calloc((size_t)(n_in + n_out), sizeof(Py_buffer));
        pointers = PyMem_Calloc((size_t)(n_in + n_out), sizeof(void *));
        if (views == NULL || pointers == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (get_buffers(self, inputs, n_in, views, pointers, 0) != 0) {
        goto done;
    }
    if (get_buffers(self, outputs, n_out, views + n_in, pointers + n_in, 1) != 0) {
        for (int32_t i = 0; i < n_in; i++) {
            PyBuffer_Release(&views[i]);
        }
        goto done;
    }

    ge_run *run = ge_run_acquire(plan);
    if (run == NULL) {
        PyErr_NoMemory();
    } else {
        python_call call = {self, state_of_type(Py_TYPE(self)), NULL, NULL, 0};
        trace_call observed = {&call, observer};
        ge_run_trace trace = {records_arg ? (ge_step_record *)records_view.buf : NULL,
                              observer ? observe_step : NULL, &observed};
        run->trace = records_arg != NULL || observer != NULL ? &trace : NULL;
        call.thread = PyEval_SaveThread();
        int32_t failed = ge_plan_run(plan, run, pointers, pointers + n_in, run_python_step,
                                     &call);
        PyEval_RestoreThread(call.thread);
        run->trace = NULL;
        if (failed >= 0) {
            raise_step_failure(self, &call, failed, run->error);
        } else {
            result = Py_NewRef(Py_None);
        }
        ge_run_release(plan, run);
    }
    for (int32_t i = 0; i < n_in + n_out; i++) {
        PyBuffer_Release(&views[i]);
    }
done:
    if (views != stack_views) {
        PyMem_Free(views);
        PyMem_Free(pointers);
    }
    if (records_arg != NULL) {
        PyBuffer_Release(&records_view);
    }
    Py_DECREF(inputs);
    Py_DECREF(outputs);
    return result;
}

PyDoc_STRVAR(Executor_run_doc,
"run(inputs, outputs, records=None, observer=None)\n--\n\n"
"Runs every step once. inputs and outputs are sequences of C-contiguous buffers (NumPy\n"
"arrays) of exactly the planned byte sizes; inputs are read in place, outputs written\n"
"in place. Raises ValueError for a bad buffer and KernelError for a failing step.\n\n"
"The optional per-step hook: records, an int64 [n_steps, 3] buffer, gets each step's\n"
"(start_ns, end_ns, lane) on CLOCK_MONOTONIC; observer(step, outputs) is called after each\n"
"step with its outputs as read-only buffers valid during the call (copy what you keep);\n"
"an exception it raises fails the run at that step.");

static PyObject *Executor_get_arena_bytes(ExecutorObject *self, void *closure) {
    return PyLong_FromLongLong((long long)self->plan->arena_bytes);
}

static PyObject *Executor_get_n_steps(ExecutorObject *self, void *closure) {
    return PyLong_FromLong(self->plan->n_steps);
}

static PyObject *Executor_get_arenas(ExecutorObject *self, void *closure) {
    return PyLong_FromLongLong((long long)ge_plan_runs_created(self->plan));
}

PyDoc_STRVAR(Executor_set_streams_doc,
"set_streams(streams, threads, events)\n--\n\n"
"Streams and events (executor.h, ge_plan_set_streams), once, before the first run:\n"
"streams and threads: one int per step; events: (signal_step, wait_step) pairs.");

/* Reads n ints of a sequence into a new array (NULL with an exception set). */
static int32_t *read_int32_array(PyObject *value, Py_ssize_t n, const char *what) {
    PyObject *seq = PySequence_Fast(value, "");
    if (seq == NULL || PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "set_streams(): %s must be a sequence of %zd ints",
                     what, n);
        Py_XDECREF(seq);
        return NULL;
    }
    int32_t *out = PyMem_Calloc((size_t)n + 1, sizeof(int32_t));
    if (out == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (read_int32(PySequence_Fast_GET_ITEM(seq, i), &out[i], what, i, "value") != 0) {
            PyMem_Free(out);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *Executor_set_streams(ExecutorObject *self, PyObject *args) {
    PyObject *streams_arg, *threads_arg, *events_arg;
    if (!PyArg_ParseTuple(args, "OOO:set_streams", &streams_arg, &threads_arg, &events_arg)) {
        return NULL;
    }
    ge_plan *plan = self->plan;
    PyObject *result = NULL, *events = NULL;
    int32_t *streams = read_int32_array(streams_arg, plan->n_steps, "streams");
    int32_t *threads = streams ? read_int32_array(threads_arg, plan->n_steps, "threads") : NULL;
    int32_t *pairs = NULL;
    Py_ssize_t n_events = 0;
    if (threads == NULL) {
        goto done;
    }
    events = PySequence_Fast(events_arg, "set_streams(): events must be a sequence");
    if (events == NULL) {
        goto done;
    }
    n_events = PySequence_Fast_GET_SIZE(events);
    if (n_events > INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "set_streams(): too many events");
        goto done;
    }
    pairs = PyMem_Calloc(2 * (size_t)n_events + 1, sizeof(int32_t));
    if (pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t e = 0; e < n_events; e++) {
        int32_t *pair = read_int32_array(PySequence_Fast_GET_ITEM(events, e), 2, "an event");
        if (pair == NULL) {
            goto done;
        }
        pairs[e] = pair[0];
        pairs[n_events + e] = pair[1];
        PyMem_Free(pair);
    }
    char error[512];
    if (ge_plan_set_streams(plan, streams, threads, (int32_t)n_events, pairs,
                            pairs + n_events, error, sizeof error) != 0) {
        PyErr_Format(PyExc_ValueError, "invalid streams: %s", error);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(events);
    PyMem_Free(streams);
    PyMem_Free(threads);
    PyMem_Free(pairs);
    return result;
}

static PyMethodDef Executor_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Executor_run, METH_FASTCALL, Executor_run_doc},
    {"set_streams", (PyCFunction)Executor_set_streams, METH_VARARGS, Executor_set_streams_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Executor_getset[] = {
    {"arena_bytes", (getter)Executor_get_arena_bytes, NULL, "bytes of one run's arena", NULL},
    {"n_steps", (getter)Executor_get_n_steps, NULL, "steps in the plan", NULL},
    {"arenas", (getter)Executor_get_arenas, NULL,
     "arenas allocated so far: the most runs that were ever in flight at once", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Executor_slots[] = {
    {Py_tp_doc, (void *)Executor_doc},
    {Py_tp_new, Executor_new},
    {Py_tp_dealloc, Executor_dealloc},
    {Py_tp_traverse, Executor_traverse},
    {Py_tp_clear, Executor_clear},
    {Py_tp_methods, Executor_methods},
    {Py_tp_getset, Executor_getset},
    {0, NULL},
};

static PyType_Spec Executor_spec = {
    .name = "ge_hub._core.Executor",
    .basicsize = sizeof(ExecutorObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Executor_slots,
};

/* -- module functions --------------------------------------------------------------------- */

static PyObject *builtin_kernels(PyObject *module, PyObject *unused) {
    PyObject *table = PyDict_New();
    if (table == NULL) {
        return NULL;
    }
    for (const ge_builtin_kernel *kernel = ge_builtin_kernels; kernel->name != NULL; kernel++) {
        PyObject *address = PyLong_FromVoidPtr((void *)kernel->fn);
        if (address == NULL || PyDict_SetItemString(table, kernel->name, address) != 0) {
            Py_XDECREF(address);
            Py_DECREF(table);
            return NULL;
        }
        Py_DECREF(address);
    }
    return table;
}

/* crc32c(data, crc=0, portable=False) over any contiguous buffer; the GIL is released
 * while a large one (a mapped file's weights) is read. */
static PyObject *crc32c(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"data", "crc", "portable", NULL};
    Py_buffer view;
    unsigned int crc = 0;
    int force_portable = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|Ip:crc32c", keywords, &view, &crc,
                                     &force_portable)) {
        return NULL;
    }
    uint32_t result;
    if (view.len >= (1 << 20)) {
        Py_BEGIN_ALLOW_THREADS
        result = ge_crc32c(view.buf, (size_t)view.len, crc, force_portable);
        Py_END_ALLOW_THREADS
    } else {
        result = ge_crc32c(view.buf, (size_t)view.len, crc, force_portable);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(result);
}

static PyObject *crc32c_hardware(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(ge_crc32c_hardware());
}

static PyObject *load_blas(PyObject *module, PyObject *path) {
    PyObject *encoded;
    if (!PyUnicode_FSConverter(path, &encoded)) {
        return NULL;
    }
    char error[1024];
    int status;
    const char *text = PyBytes_AS_STRING(encoded);
    Py_BEGIN_ALLOW_THREADS
    status = ge_blas_load(text, error, sizeof error);
    Py_END_ALLOW_THREADS
    Py_DECREF(encoded);
    if (status != 0) {
        PyErr_SetString(PyExc_OSError, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *blas_available(PyObject *module, PyObject *unused) {
    return PyBool_FromLong(ge_blas_available());
}

static PyObject *set_blas_threads(PyObject *module, PyObject *value) {
    long threads = PyLong_AsLong(value);
    if (threads == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (threads < 1 || threads > 1024) {
        PyErr_Format(PyExc_ValueError, "set_blas_threads: expected 1..1024, got %ld", threads);
        return NULL;
    }
    ge_blas_set_num_threads((int)threads);
    Py_RETURN_NONE;
}

static PyObject *num_threads(PyObject *module, PyObject *unused) {
    return PyLong_FromLong(ge_threadpool_size());
}

static PyMethodDef module_methods[] = {
    {"builtin_kernels", builtin_kernels, METH_NOARGS,
     "builtin_kernels() -> dict[str, int]: the address of every built-in C kernel by name."},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_VARARGS | METH_KEYWORDS,
     "crc32c(data, crc=0, portable=False) -> int: CRC-32C of a buffer, chained like "
     "zlib.crc32 (the .ghm checksum; SSE4.2 where the CPU has it)."},
    {"crc32c_hardware", crc32c_hardware, METH_NOARGS,
     "crc32c_hardware() -> bool: whether crc32c uses the SSE4.2 instruction."},
    {"load_blas", load_blas, METH_O,
     "load_blas(path): dlopen a BLAS exporting scipy_cblas_sgemm for ge_sgemm (OSError if not)."},
    {"blas_available", blas_available, METH_NOARGS,
     "blas_available() -> bool: whether ge_sgemm calls a loaded BLAS."},
    {"set_blas_threads", set_blas_threads, METH_O,
     "set_blas_threads(n): threads the loaded BLAS may use for one call."},
    {"num_threads", num_threads, METH_NOARGS,
     "num_threads() -> int: threads a parallel kernel loop may use (GE_HUB_NUM_THREADS)."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *module) {
    module_state *state = PyModule_GetState(module);
    state->executor_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &Executor_spec, NULL);
    if (state->executor_type == NULL) {
        return -1;
    }
    state->step_buffer_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &StepBuffer_spec, NULL);
    if (state->step_buffer_type == NULL) {
        return -1;
    }
    state->kernel_error = PyErr_NewExceptionWithDoc(
        "ge_hub._core.KernelError",
        "A step of a plan failed; the message names its node and op (also the attributes\n"
        "`node` and `op`). A Python kernel's exception is chained as the cause.",
        PyExc_RuntimeError, NULL);
    if (state->kernel_error == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Executor", (PyObject *)state->executor_type) < 0
        || PyModule_AddObjectRef(module, "KernelError", state->kernel_error) < 0
        || PyModule_AddIntConstant(module, "ABI_VERSION", GE_KERNEL_ABI_VERSION) < 0
        || PyModule_AddIntConstant(module, "MAX_RANK", GE_MAX_RANK) < 0
        || PyModule_AddIntConstant(module, "ARENA_ALIGNMENT", GE_ARENA_ALIGNMENT) < 0
        || PyModule_AddIntConstant(module, "KIND_C", KIND_C) < 0
        || PyModule_AddIntConstant(module, "KIND_PYTHON", KIND_PYTHON) < 0
        || PyModule_AddIntConstant(module, "STORAGE_ARENA", GE_STORAGE_ARENA) < 0
        || PyModule_AddIntConstant(module, "STORAGE_INPUT", GE_STORAGE_INPUT) < 0
        || PyModule_AddIntConstant(module, "STORAGE_OUTPUT", GE_STORAGE_OUTPUT) < 0
        || PyModule_AddIntConstant(module, "STORAGE_CONSTANT", GE_STORAGE_CONSTANT) < 0) {
        return -1;
    }
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    module_state *state = PyModule_GetState(module);
    Py_VISIT(state->executor_type);
    Py_VISIT(state->step_buffer_type);
    Py_VISIT(state->kernel_error);
    return 0;
}

static int module_clear(PyObject *module) {
    module_state *state = PyModule_GetState(module);
    Py_CLEAR(state->executor_type);
    Py_CLEAR(state->step_buffer_type);
    Py_CLEAR(state->kernel_error);
    return 0;
}

static void module_free(void *module) {
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ge_hub._core",
    .m_doc = "The C executor of ge-hub: runs a compiled plan in one call (see core/).",
    .m_size = sizeof(module_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void) {
    return PyModuleDef_Init(&core_module);
}
