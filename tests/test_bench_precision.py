"""bench/precision.py's figures: the error against fp32 and the Markdown of a results
document (the measuring itself needs the bench's PyTorch models and runs by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import precision


def test_error_is_relative_to_the_largest_reference_value():
    want = [np.array([1.0, -4.0, 2.0], np.float32)]
    got = [np.array([1.0, -4.0, 2.5], np.float32)]
    assert precision._error(got, want) == 0.125
    assert precision._error(want, want) == 0.0


def test_error_against_a_constant_reference_is_undefined_not_zero():
    """Light ResNet-50's fp32 output is 0.001 a thousand times (a Softmax of equal logits):
    its error measures nothing, and a 0 would read as exact."""
    uniform = [np.full(1000, 0.001, np.float32)]
    assert precision._error(uniform, uniform) is None
    varying = [np.array([1.0, -4.0, 2.0], np.float32)]
    assert precision._error(varying + uniform, varying + uniform) == 0.0
    doc = _doc()
    doc["models"][0]["rows"]["ge-hub bf16"]["error_vs_fp32"] = None
    assert "11.00 ms, err n/a (fp32 output constant)" in precision.markdown(doc)


def _doc():
    rows = {row: {"ms": 10.0 + i, "rounds": 5, "error_vs_fp32": 0.001 * i}
            for i, row in enumerate(precision.ROWS)}
    rows["ge-hub mixed"].update(bf16_steps=18, fp32_products={"FusedConv": 2, "Gemm": 1},
                                bf16_kernel="amx")
    rows["ort"] = {"error": "RuntimeError: no"}
    forced = {"rows": {"ge-hub fp32": {"ms": 30.0}, "ge-hub bf16": {"ms": 15.0}}}
    return {"threads": 1, "bf16_kernel": "amx",
            "models": [{"model": "resnet18-b1", "rows": rows, "avx512bf16_forced": forced}]}


def test_markdown_has_every_row_the_forced_variant_and_what_mixed_kept():
    text = precision.markdown(_doc())
    assert "| resnet18-b1 | 10.00 ms, err 0.0e+00 | 11.00 ms, err 1.0e-03 |" in text
    assert "| failed |" in text  # the ORT row that failed
    assert "30.00 ms / 15.00 ms (2.00x)" in text
    assert "mixed kept in fp32: FusedConv 2, Gemm 1; 18 product steps in bf16" in text
    doc = _doc()
    doc["models"][0]["rows"]["ge-hub mixed"]["bf16x3_products"] = {"MatMul": 2}
    assert ("mixed kept in fp32: FusedConv 2, Gemm 1; in bf16x3: MatMul 2; 18 product "
            "steps in bf16") in precision.markdown(doc)
    assert precision.failed(_doc())


def test_every_row_is_an_engine_the_workers_make():
    """Each row runs in a bench.worker process, which makes its engine by name."""
    from bench import engines

    for threads in (1, 2):
        names = [precision.engine_name(row, threads) for row in precision.ROWS]
        assert len(set(names)) == len(names)
        for name in names:
            made = engines.ENGINES[name]()
            assert made.name == name and made.threads == threads
    assert engines.ENGINES["ge-hub-2t-bf16"]().precision == "bf16"
    assert engines.ENGINES["ov-1t-default"]().precision is None


def test_a_full_bench_run_leaves_the_precision_rows_to_bench_precision():
    """`python -m bench` runs its own engines: the precision rows would repeat ge-hub's
    fp32 figures and share each model's time budget with them."""
    import argparse

    from bench import engines
    from bench.__main__ import settings_for

    args = argparse.Namespace(engines=None, quick=False, rounds=None, budget=None,
                              no_profile=False, cold_inductor=False)
    chosen = settings_for(args).engines
    assert "ge-hub" in chosen and "ort-2t" in chosen and "ov-1t" in chosen
    assert not [e for e in chosen if e.endswith(("-fp32", "-bf16", "-mixed", "-default"))]
    assert set(chosen) == set(engines.SUITE_ENGINES)


def test_varied_inputs_redraw_floats_the_same_way_for_every_engine():
    from bench.worker import varied_inputs

    inputs = {"x": np.ones((2, 3), np.float32), "ids": np.arange(4, dtype=np.int64)}
    a, b = varied_inputs(inputs, 1), varied_inputs(inputs, 1)
    assert a["x"].dtype == np.float32 and a["x"].shape == (2, 3)
    np.testing.assert_array_equal(a["x"], b["x"])  # same seed, same arrays
    assert not np.array_equal(a["x"], varied_inputs(inputs, 2)["x"])
    assert not np.array_equal(a["x"], inputs["x"])
    np.testing.assert_array_equal(a["ids"], inputs["ids"])  # integers kept


class _Worker:
    """Answers ("outputs", seed) as a worker would: y = scale * x(seed)."""

    def __init__(self, scale, fails=False):
        self.scale, self.fails = scale, fails

    def request(self, command, seed):
        from bench.engine_process import EngineError

        assert command == "outputs"
        if self.fails:
            raise EngineError("cannot bind")
        return [np.arange(1, 5, dtype=np.float32) * seed * self.scale]


def test_errors_are_measured_on_every_input_and_reported_as_their_median():
    workers = {"ge-hub fp32": _Worker(1.0), "ge-hub bf16": _Worker(1.01),
               "ort": _Worker(1.0, fails=True)}
    own = {row: [np.arange(1, 5, dtype=np.float32) * 2.0] for row in workers}
    own["ge-hub bf16"] = [own["ge-hub bf16"][0] * 1.1]
    errors = precision._errors_over_inputs(workers, own, extra_inputs=3)
    assert errors["ge-hub fp32"] == [0.0, 0.0, 0.0, 0.0]
    assert errors["ge-hub bf16"] == pytest.approx([0.1, 0.01, 0.01, 0.01], rel=1e-5)
    assert errors["ort"] == [0.0, None, None, None]  # only its own input's outputs
    assert precision._median(errors["ge-hub bf16"]) == pytest.approx(0.01, rel=1e-5)
    assert precision._median([None, None]) is None


def test_a_row_is_its_fastest_process_with_the_spread_beside_it():
    figures = precision.process_figures([[0.010, 0.011, 0.012], [0.0125, 0.013, 0.0135]])
    assert figures["ms"] == pytest.approx(11.0)
    assert figures["process_ms"] == pytest.approx([11.0, 13.0])
    assert figures["spread"] == pytest.approx(2.0 / 11.0)
    assert figures["rounds"] == 6
    assert precision.process_figures([[0.002]])["spread"] == 0.0
    doc = _doc()
    doc["processes"] = 2
    doc["models"][0]["rows"]["ge-hub bf16"].update(process_ms=[11.0, 13.0], spread=2.0 / 11.0)
    text = precision.markdown(doc)
    assert "the fastest of 2 worker processes" in text
    assert "| 11.00 ms (+18%), err 1.0e-03 |" in text
    assert "| resnet18-b1 | 10.00 ms, err 0.0e+00 |" in text  # one process: no spread


class _TimedWorker:
    """An EngineProcess stand-in: each process of a row answers its own fixed time."""

    started: list = []

    def __init__(self, engine, model, env):
        self.engine, self.env = engine, env
        self.index = sum(1 for w in _TimedWorker.started if w.engine == engine)
        self.timed = 0
        _TimedWorker.started.append(self)

    def start(self, files, timeout):
        from bench.engine_process import EngineError

        if self.engine.startswith("ort") and self.index == 1:
            raise EngineError("the second process cannot bind")
        return {"outputs": [np.arange(1, 5, dtype=np.float32)]}

    def time(self, calls):
        self.timed += 1
        return 0.001 * (2 + self.index)  # the second process of each row runs slower

    def request(self, command, seed=None):
        if command == "outputs":
            return [np.arange(1, 5, dtype=np.float32)]
        return {"details": {"precision": {"bf16_steps": 0, "bf16_kernel": "generic"},
                            "fp32_product_ops": {}}}

    def close(self):
        pass


def test_every_process_of_every_row_is_timed_in_each_round(monkeypatch):
    from bench import engine_process

    _TimedWorker.started = []
    monkeypatch.setattr(engine_process, "EngineProcess", _TimedWorker)
    result = precision.measure_model("m", 1, ("ge-hub fp32", "ge-hub bf16", "ort"), rounds=3,
                                     budget=60.0, directory="", files=object(), processes=2)
    fp32 = result["rows"]["ge-hub fp32"]
    assert fp32["process_ms"] == pytest.approx([2.0, 3.0]) and fp32["ms"] == pytest.approx(2.0)
    assert fp32["spread"] == pytest.approx(0.5) and fp32["rounds"] == 6
    assert fp32["error_vs_fp32"] == 0.0
    assert "error" in result["rows"]["ort"]  # a row with a process that failed: reported
    timed = {(w.engine, w.index): w.timed for w in _TimedWorker.started}
    # three rounds each, and the first process's probe of how many calls make a round
    assert timed[("ge-hub-1t-fp32", 0)] == timed[("ge-hub-1t-bf16", 0)] == 4
    assert timed[("ge-hub-1t-fp32", 1)] == timed[("ge-hub-1t-bf16", 1)] == 3
    assert timed[("ort-1t", 0)] == 1  # probed, then closed with its failed second process


def test_the_forced_rows_are_interleaved_with_the_others(monkeypatch, tmp_path):
    """Timed in the same rounds (a slow phase of the machine moves every row alike), in
    workers started with the AVX512-BF16 variant forced, and reported apart."""
    from bench import engine_process

    _TimedWorker.started = []
    monkeypatch.setattr(engine_process, "EngineProcess", _TimedWorker)
    monkeypatch.setattr(precision, "_files", lambda name, directory: object())
    monkeypatch.setenv("BENCH_PRECISION_DIR", str(tmp_path))
    monkeypatch.setenv("GE_HUB_NUM_THREADS", "1")  # measure() sets it: restored after
    monkeypatch.setattr(precision, "ROWS", ("ge-hub fp32", "ge-hub bf16", "ov f32"))
    doc = precision.measure(["resnet18-b1"], 1, quick=False)
    (entry,) = doc["models"]
    assert doc["processes"] == precision.PROCESSES == 2
    assert set(entry["rows"]) == {"ge-hub fp32", "ge-hub bf16", "ov f32"}
    forced = entry["avx512bf16_forced"]["rows"]
    assert set(forced) == {"ge-hub fp32", "ge-hub bf16"}
    assert forced["ge-hub bf16"]["rounds"] == entry["rows"]["ov f32"]["rounds"] == 40
    envs = {(w.engine, w.env.get("GE_HUB_BF16_KERNEL")) for w in _TimedWorker.started}
    assert envs == {("ge-hub-1t-fp32", None), ("ge-hub-1t-bf16", None), ("ov-1t", None),
                    ("ge-hub-1t-fp32", "avx512bf16"), ("ge-hub-1t-bf16", "avx512bf16")}
    assert len(_TimedWorker.started) == 10  # five rows, two processes each
