"""Offline models (.ghm, ge_hub.offline): saved and loaded models give bit-identical outputs,
stored plans run without compiling, constants are mapped from the file, other shapes are
planned from the stored graph (or refused), non-portable files, the .ghm frontend, the
portability rules and the kernel provenance checks."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from offline_models import MODELS, attention, conv_net, feeds, loop

import ge_hub
from ge_hub import plugins, runtime
from ge_hub.errors import OfflineModelError, ProfileNotCompiledError
from ge_hub.ir import serialize
from ge_hub.kernels import closure as closure_kernel
from ge_hub.offline import layout, open_file, portability


def _no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled, but the plan should have come from the file")

    monkeypatch.setattr(runtime, "compile_plan", refuse)


def _mapped(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=True)


@pytest.mark.parametrize("build", MODELS, ids=lambda f: f.__name__)
def test_loaded_model_is_bit_identical_and_runs_without_compiling(build, tmp_path, monkeypatch):
    graph, shapes = build()
    model = ge_hub.compile(graph, input_shapes=shapes)
    x = feeds(graph, shapes)
    want = model.run(x)
    path = tmp_path / "m.ghm"
    model.save(path)
    _no_compiling(monkeypatch)
    loaded = ge_hub.load_compiled(path)
    _same(loaded.run(x), want)
    assert [(s.kernel, s.attrs) for s in loaded.plan.steps] == \
        [(s.kernel, s.attrs) for s in model.plan.steps]
    assert loaded.summary()["steps"] == model.summary()["steps"]


def test_prepacked_weights_are_mapped_read_only_and_stored_once(tmp_path):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    model.run(feeds(graph, dict(shapes, x=(4, 3, 18, 18))))  # a second profile
    path = tmp_path / "m.ghm"
    model.save(path)
    loaded = ge_hub.load_compiled(path)
    plans = loaded.plans()
    assert len(plans) == 2
    packed = [t for t in plans[0][1].tensors if ":packed:" in t.name]
    assert packed, "the conv net should have prepacked weights"
    for _, plan, _ in plans:
        for constant in plan.constants:
            if constant.size:
                assert _mapped(constant), "constants must be views of the mapped file"
                assert not constant.flags.writeable
    # the two profiles' equal constants are one range of the file
    first = {c.__array_interface__["data"][0] for c in plans[0][1].constants if c.size}
    second = {c.__array_interface__["data"][0] for c in plans[1][1].constants if c.size}
    assert first & second
    # graph constants and the plans' unpacked constants share bytes too
    graph_addresses = {v.const.__array_interface__["data"][0] for v in loaded.graph.constants
                       if v.const.size}
    assert graph_addresses & first


def test_every_stored_profile_runs_without_compiling_and_other_shapes_are_planned(
        tmp_path, monkeypatch):
    graph, shapes = attention()
    model = ge_hub.compile(graph)
    small, large = {"x": (1, 5, 16), "mask": (1, 1, 1, 5)}, {"x": (3, 9, 16),
                                                              "mask": (3, 1, 1, 9)}
    want = {k: model.run(feeds(graph, s)) for k, s in (("small", small), ("large", large))}
    path = tmp_path / "m.ghm"
    model.save(path)
    other = {"x": (2, 4, 16), "mask": (2, 1, 1, 4)}
    want_other = model.run(feeds(graph, other))

    strict = ge_hub.load_compiled(path, allow_compile=False)
    with monkeypatch.context() as patch:
        _no_compiling(patch)
        _same(strict.run(feeds(graph, small)), want["small"])
        _same(strict.run(feeds(graph, large)), want["large"])
        with pytest.raises(ProfileNotCompiledError, match=r"no compiled profile matches"):
            strict.run(feeds(graph, other))

    loose = ge_hub.load_compiled(path)
    _same(loose.run(feeds(graph, other)), want_other)  # planned from the stored graph
    assert loose.summary()["cached_plans"] == 3
    with monkeypatch.context() as patch:
        _no_compiling(patch)
        _same(loose.run(feeds(graph, other)), want_other)  # and cached


@pytest.mark.parametrize("in_c", [True, False], ids=["c-control", "python-closure"])
def test_control_steps_and_value_specialized_plans_round_trip(tmp_path, monkeypatch, in_c):
    if not in_c:  # no plan compiler for the C control kernel: the Python closure runs it
        monkeypatch.setattr(closure_kernel, "_plan_compiler", None)
        monkeypatch.setattr(closure_kernel, "_cache", type(closure_kernel._cache)())
    graph, shapes = loop()
    model = ge_hub.compile(graph)
    x = feeds(graph, shapes, m=3)
    want = model.run(x)
    # The Loop is one step: the C control kernel with its body as a sub-plan, or the
    # Closure driving it from Python, counted.
    assert model.summary()["python_steps"] == (0 if in_c else 1)
    path = tmp_path / "loop.ghm"
    model.save(path)
    info = open_file(path).meta
    assert info["value_inputs"] == [1]
    assert info["profiles"][0]["python_ops"] == ([] if in_c else ["Closure"])
    loaded = ge_hub.load_compiled(path)
    with monkeypatch.context() as patch:
        _no_compiling(patch)
        _same(loaded.run(x), want)
        assert loaded.summary()["python_steps"] == (0 if in_c else 1)
        if in_c:  # the body came from the file, with its constants mapped from it
            (step,) = [s for s in loaded.plan.steps if s.op == "Closure"]
            assert step.kernel == "control" and len(loaded.plan.subplans) == 1
            body = loaded.plan.subplans[0]
            assert body.input_names[:3] == ("i", "c", "s") and body.steps
    other = feeds(graph, shapes, m=5)
    _same(loaded.run(other), model.run(other))  # another trip count: planned from the graph


def test_non_portable_file_has_no_graph_and_runs_only_its_profiles(tmp_path):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    x = feeds(graph, shapes)
    portable, bare = tmp_path / "p.ghm", tmp_path / "bare.ghm"
    model.save(portable)
    model.save(bare, portable=False)
    assert bare.stat().st_size < portable.stat().st_size
    file = open_file(bare)
    assert "graph" not in file.sections and not file.header.portable
    loaded = ge_hub.load_compiled(bare)
    _same(loaded.run(x), model.run(x))
    with pytest.raises(ProfileNotCompiledError):
        loaded.run(feeds(graph, {"x": (3, 3, 18, 18)}))
    with pytest.raises(ValueError, match="must have dtype float32"):
        loaded.run({"x": x["x"].astype(np.float64)})
    with pytest.raises(OfflineModelError, match="not portable"):
        ge_hub.load(bare)
    with pytest.raises(ValueError, match="saves with portable=False"):
        loaded.save(tmp_path / "again.ghm")
    loaded.save(tmp_path / "again.ghm", portable=False)
    _same(ge_hub.load_compiled(tmp_path / "again.ghm").run(x), model.run(x))


def test_ge_hub_load_takes_ghm_files_by_suffix_and_by_magic(tmp_path):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path / "m.ghm"
    model.save(path)
    loaded = ge_hub.load(str(path))
    assert serialize.dumps(loaded) == serialize.dumps(graph)
    renamed = tmp_path / "model.bin"
    renamed.write_bytes(path.read_bytes())
    assert serialize.dumps(ge_hub.load(str(renamed))) == serialize.dumps(graph)
    assert renamed.read_bytes().startswith(layout.MAGIC)


def test_metadata_records_versions_source_and_portability(tmp_path):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    source = tmp_path / "conv.gehub"
    serialize.save(graph, source)
    path = tmp_path / "m.ghm"
    model.save(path, source=source, profile_names={model.plans()[0][0]: "main"})
    file = open_file(path)
    meta = file.meta
    assert meta["ge_hub_version"] == ge_hub.__version__
    assert file.header.abi == meta["kernel_abi"]
    assert meta["source"]["name"] == "conv.gehub"
    import hashlib

    assert meta["source"]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert [p["name"] for p in meta["profiles"]] == ["main"]
    assert meta["portability"]["gemm_kernel"]["name"] == portability.gemm_kernel()
    assert "packed_gemm" in meta["portability"]["layouts"]
    assert all(entry == {"plugin": "builtin"} for entry in meta["kernels"].values())
    for kind, (offset, _, _) in file.sections.items():
        assert offset % 64 == 0, kind


def test_saving_an_unspecialized_model_is_refused(tmp_path):
    graph, _ = attention()
    with pytest.raises(ValueError, match="no compiled plan yet"):
        ge_hub.compile(graph).save(tmp_path / "m.ghm")


# -- portability --------------------------------------------------------------------


def _other_geometry(monkeypatch):
    real = portability.layout_geometry()
    changed = {"packed_gemm": dict(real["packed_gemm"], mr=real["packed_gemm"]["mr"] + 4)}
    monkeypatch.setattr(portability, "layout_geometry", lambda: changed)


def test_portable_file_is_planned_again_when_its_layouts_do_not_fit(tmp_path, monkeypatch):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    x = feeds(graph, shapes)
    path = tmp_path / "m.ghm"
    model.save(path)
    _other_geometry(monkeypatch)
    with pytest.warns(RuntimeWarning, match="planned again from its graph"):
        loaded = ge_hub.load_compiled(path)
    assert loaded.plans() == []
    _same(loaded.run(x), model.run(x))  # re-packed by this ge-hub's packer


def test_non_portable_file_is_refused_naming_the_geometry_or_cpu_feature(tmp_path,
                                                                        monkeypatch):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path / "m.ghm"
    model.save(path, portable=False)
    with monkeypatch.context() as patch:
        _other_geometry(patch)
        with pytest.raises(OfflineModelError, match=r"layout 'packed_gemm' was packed as"):
            ge_hub.load_compiled(path)
    # a layout that would need a feature this CPU lacks
    monkeypatch.setitem(portability.LAYOUT_FEATURES, "packed_gemm", ("avx9000",))
    monkeypatch.setattr(portability, "cpu_flags", lambda: frozenset({"sse2"}))
    model.save(path, portable=False)
    with pytest.raises(OfflineModelError, match=r"needs CPU feature\(s\) avx9000"):
        ge_hub.load_compiled(path)


def test_gemm_kernel_follows_the_override(monkeypatch):
    monkeypatch.setenv("GE_HUB_GEMM_KERNEL", "generic")
    assert portability.gemm_kernel() == "generic"
    monkeypatch.delenv("GE_HUB_GEMM_KERNEL")
    assert portability.gemm_kernel() in portability.KERNEL_FEATURES


# -- kernels and plugins ------------------------------------------------------------


@pytest.fixture
def fresh_plugins():
    plugins.reset()
    yield
    plugins.reset()


def _scale_shift_model():
    from ge_hub import es

    with es.GraphBuilder("scale_shift") as gb:
        x = es.input("x", "float32", [4, 3])
        gb.output(es.relu(es.add(es.mul(x, np.float32(2)), np.float32(1))), "y")
    return ge_hub.compile(gb.graph, input_shapes={"x": (4, 3)})


def test_missing_plugin_is_named(tmp_path, monkeypatch, fresh_plugins, example_plugin):
    monkeypatch.delenv("GE_HUB_PLUGINS", raising=False)
    monkeypatch.delenv("GE_HUB_DISABLE_PLUGINS", raising=False)
    plugins.reset()
    assert "example" in {p.name for p in plugins.loaded_plugins()}
    model = _scale_shift_model()
    kernels = {s.kernel for s in model.plan.steps}
    assert "example.scale_shift" in kernels
    path = tmp_path / "m.ghm"
    model.save(path)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    _same(ge_hub.load_compiled(path).run({"x": x}), model.run({"x": x}))
    meta = open_file(path).meta
    assert meta["kernels"]["example.scale_shift"]["plugin"] == "example"
    monkeypatch.setenv("GE_HUB_DISABLE_PLUGINS", "example")
    plugins.reset()
    with pytest.raises(OfflineModelError,
                       match=r"kernel 'example.scale_shift'.*plugin 'example'.*not installed"):
        ge_hub.load_compiled(path)


def test_ge_hub_compile_of_a_ghm_file_uses_its_plans(tmp_path, monkeypatch):
    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path / "m.ghm"
    model.save(path)
    x = feeds(graph, shapes)
    with monkeypatch.context() as patch:
        _no_compiling(patch)
        loaded = ge_hub.compile(str(path), input_shapes=shapes)
        _same(loaded.run(x), model.run(x))
    other = ge_hub.compile(str(path), input_shapes={"x": (3, 3, 18, 18)})
    assert other.plan.signature == ((3, 3, 18, 18),)
    assert len(other.plans()) == 2


def test_running_a_stored_profile_never_reads_the_graph(tmp_path, monkeypatch):
    from ge_hub.offline import reader

    graph, shapes = conv_net()
    model = ge_hub.compile(graph, input_shapes=shapes)
    path = tmp_path / "m.ghm"
    model.save(path)
    x = feeds(graph, shapes)
    reads = []
    real = reader.OfflineFile.graph

    def counted(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(reader.OfflineFile, "graph", counted)
    loaded = ge_hub.load_compiled(path)
    _same(loaded.run(x), model.run(x))
    assert [v.name for v in loaded.interface.inputs] == ["x"]
    assert loaded.interface.nodes == [] and reads == []
    assert len(loaded.graph.nodes) == len(graph.nodes) and reads == [1]  # on first use
    assert loaded.interface is loaded.graph
    loaded.graph  # noqa: B018
    assert reads == [1]
