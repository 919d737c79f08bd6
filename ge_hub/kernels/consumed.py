"""Constants a prepacker may free while it reads them.

Packing a weight into a kernel's layout writes a second array as large as the first, and
the first is let go only after the packer returns (`ge_hub.emit`): packing a model's
largest weight needs it twice. A CNN classifier's first Linear is most of the model
(VGG-19's is 392 MiB of 548), so that doubling is the peak memory of the compile.

`emit_plan` names, per node, the constants that this node's prepacker reads for the last
time and that nothing outside the graph holds (`consumable`). A packer that has copied a
run of such a constant's rows into its own array may then hand those rows' memory back to
the system (`release_rows`): the pages are dropped, so the original shrinks as the packed
form grows and the peak is about one copy of the weight. Only whole pages inside the rows
are released; the array itself stays valid to hold (its dropped pages read as zeros), and
it is never read again: emit lets it go right after the packer returns.

A constant qualifies when only the graph's value refers to it and nothing else holds what
its memory comes from (the array it views, a buffer, an anonymous mapping as ge-onnx
reads large weights into): no other view can read the dropped pages. Its memory must be
NumPy's, Python's (bytes, as a .gehub file's constants are) or a mapping: an array over
memory that another library owns (a torch tensor's storage) never qualifies, since that
memory may be shared by objects that do not refer to each other. Elsewhere, and where
`madvise` does not exist, `release_rows` does nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import mmap
import sys

import numpy as np

_CONSUMABLE: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "ge_hub_consumable", default=frozenset())
_RELEASED: contextvars.ContextVar[set[int] | None] = contextvars.ContextVar(
    "ge_hub_released", default=None)
_MADV_DONTNEED = 4
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25  # Linux 6.1 and later
_PAGE = mmap.PAGESIZE


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


_madvise_fn = _madvise()


def _parent(obj):
    if isinstance(obj, np.ndarray):
        return obj.base
    if isinstance(obj, memoryview):
        return obj.obj
    return None


def _references_to_an_argument(value) -> int:
    return sys.getrefcount(value)


class _Holder:
    value: object


_holder = _Holder()
_holder.value = object()
# What sys.getrefcount says, inside a call, of an object one holder refers to that was
# passed as the call's argument: Python 3.10 counts the caller's stack as well, 3.11 and
# later do not. `may_consume` compares with it rather than with a constant.
_ONE_HOLDER = _references_to_an_argument(_holder.value)
del _holder


def may_consume(array: np.ndarray, holders: int) -> bool:
    """Whether `array` can be released as it is read: nothing but the caller's `holders`
    (the graph value that refers to it, say) holds it, beside this call's argument, and
    nothing else holds any object its memory comes from (the array it views, a buffer,
    a mapping), which could be read through another view."""
    if not isinstance(array, np.ndarray) or array.nbytes < 4 * _PAGE:
        return False
    if sys.getrefcount(array) > _ONE_HOLDER + holders - 1:
        return False
    link = _parent(array)
    while link is not None:
        # the child's reference, this local and getrefcount's argument
        if sys.getrefcount(link) > 3:
            return False
        if not isinstance(link, (np.ndarray, memoryview, mmap.mmap, bytes, bytearray)):
            # Memory another library owns (a torch tensor's storage, say) may be shared
            # by objects that do not refer to each other: never released.
            return False
        link = _parent(link)
    return True


@contextlib.contextmanager
def consumable(arrays):
    """While the block runs, `release_rows` may drop the pages of these arrays."""
    token = _CONSUMABLE.set(frozenset(id(a) for a in arrays))
    try:
        yield
    finally:
        _CONSUMABLE.reset(token)


@contextlib.contextmanager
def released_rows():
    """Collects the ids of the arrays `release_rows` dropped pages of inside the block."""
    ids: set[int] = set()
    token = _RELEASED.set(ids)
    try:
        yield ids
    finally:
        _RELEASED.reset(token)


def is_consumable(array: np.ndarray) -> bool:
    return id(array) in _CONSUMABLE.get()


def release_rows(array: np.ndarray, begin: int, end: int) -> int:
    """Drop the whole pages of rows [begin, end) of a C-contiguous `array` that
    `consumable` named; returns the bytes released (0 where nothing may be)."""
    if _madvise_fn is None or not is_consumable(array) or not array.flags.c_contiguous:
        return 0
    row_bytes = array.nbytes // max(1, array.shape[0])
    start = array.ctypes.data + begin * row_bytes
    stop = array.ctypes.data + end * row_bytes
    first = -(-start // _PAGE) * _PAGE
    last = stop // _PAGE * _PAGE
    if last <= first:
        return 0
    released = _RELEASED.get()
    if released is not None:
        released.add(id(array))  # before the call: a failed call may have dropped some
    if _madvise_fn(first, last - first, _MADV_DONTNEED) != 0:
        return 0
    return last - first


def empty_in_small_pages(count: int, dtype) -> np.ndarray:
    """An uninitialized 1-D array in its own private anonymous mapping, resident page by
    page as it is written. NumPy asks for huge pages for large arrays, and a packer that
    writes a little into every part of its result in turn (`_pack_by_panels`) would make
    all of it resident, 2 MiB at a time, long before it is full, while the source it
    releases shrinks 4 KiB at a time."""
    nbytes = count * np.dtype(dtype).itemsize
    if _madvise_fn is None or nbytes < 4 * _PAGE:
        return np.empty(count, dtype)
    mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(mapping, dtype, count)


def to_huge_pages(array: np.ndarray) -> None:
    """Move a finished array into huge pages where the kernel can (MADV_COLLAPSE copies
    2 MiB at a time): the packed weights are streamed at every run, and fewer pages mean
    fewer TLB misses. Best effort: nothing happens where it is not supported."""
    if _madvise_fn is None or array.nbytes < (2 << 20):
        return
    start = -(-array.ctypes.data // (2 << 20)) * (2 << 20)
    stop = (array.ctypes.data + array.nbytes) // (2 << 20) * (2 << 20)
    if stop > start:
        _madvise_fn(start, stop - start, _MADV_HUGEPAGE)
        _madvise_fn(start, stop - start, _MADV_COLLAPSE)
