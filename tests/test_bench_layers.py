"""bench/layers.py's arithmetic, its Markdown and what fails a run (the measuring itself
runs in the `bench` tox env: `python -m bench.layers --quick`)."""

from __future__ import annotations

from bench import engines, layers


def test_shapes_and_flops_follow_the_convolutions():
    r50 = layers.BY_NAME["r50-1x1-res"]
    assert layers.output_shape(r50) == (1, 256, 56, 56)
    assert layers.flops(r50) == 2 * 256 * 56 * 56 * 64
    pair = layers.BY_NAME["mbv2-expand-dw"]  # 1x1 to 96 at 112x112, then depthwise s2
    assert layers.output_shape(pair) == (1, 96, 56, 56)
    assert layers.flops(pair) == 2 * 96 * 112 * 112 * 16 + 2 * 96 * 56 * 56 * 9
    stem = layers.BY_NAME["r18-stem"]
    assert layers.output_shape(stem) == (1, 64, 112, 112)
    bert = layers.BY_NAME["bert-ffn-up"]
    assert layers.output_shape(bert) == (128, 3072)
    assert layers.flops(bert) == 2 * 128 * 768 * 3072


def _doc(**overrides):
    rows = {
        "ge-hub fp32": {"ms": 2.0, "nodes_ms": 1.8, "error_vs_fp32": 0.0},
        "ge-hub bf16": {"ms": 1.0, "nodes_ms": 0.9, "error_vs_fp32": 2e-3},
        "ort": {"ms": 1.9, "error_vs_fp32": 2e-7},
        "ov default": {"ms": 2.4, "nodes_ms": 0.6, "reorder_ms": 1.5, "error_vs_fp32": 2e-3},
        "ov f32": {"ms": 3.0, "nodes_ms": 1.2, "reorder_ms": 1.5, "error_vs_fp32": 2e-7},
    }
    for row, change in overrides.items():
        rows[row] = change
    return {"threads": 1, "bf16_kernel": "avx512bf16",
            "layers": [{"model": "r50-1x1-res", "rows": rows, "gflop": 0.103,
                        "description": "ResNet-50: 1x1"}]}


def test_markdown_compares_the_engines_own_node_times():
    """The ratio is of node times: a one-layer model's OpenVINO call converts its input and
    output to and from its blocked layout, which a whole model pays once."""
    text = layers.markdown(_doc())
    assert "| r50-1x1-res | 0.103 | 2.000 ms (nodes 1.800) |" in text
    assert "2.400 ms (nodes 0.600), err 2.0e-03" in text
    assert text.rstrip().splitlines()[-3].endswith("| 1.50 |")  # 0.9 / 0.6
    assert not layers.failed(_doc())


def test_a_disagreeing_fp32_engine_or_a_broken_bf16_row_fails_the_run():
    wrong = _doc(ort={"ms": 1.9, "error_vs_fp32": 1e-2})
    assert layers.failed(wrong)
    assert "ort error 1.0e-02 > 1e-03" in layers.markdown(wrong)
    assert layers.failed(_doc(**{"ge-hub bf16": {"ms": 1.0, "error_vs_fp32": 0.2}}))
    assert not layers.failed(_doc(**{"ge-hub bf16": {"ms": 1.0, "error_vs_fp32": 0.03}}))
    dead = _doc(**{"ov default": {"error": "RuntimeError: no"}})
    assert layers.failed(dead) and "| failed |" in layers.markdown(dead)
    assert "n/a" in layers.markdown(dead)  # no ratio without OpenVINO's nodes


def test_every_row_is_an_engine_the_workers_make_with_node_times():
    from bench import precision

    for threads in (1, 2):
        for row in layers.ROWS:
            name = precision.engine_name(row, threads) + ("" if row == "ort" else "-nodes")
            made = engines.ENGINES[name]()
            assert made.name == name and made.threads == threads
            assert getattr(made, "node_times", False) == (row != "ort")


def test_quick_layers_exist():
    assert layers.QUICK and all(name in layers.BY_NAME for name in layers.QUICK)
