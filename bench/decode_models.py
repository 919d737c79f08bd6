"""A greedy decode loop for control flow in C (issue 17): an ONNX Loop over a GRU cell,
built with onnx.helper (random weights, nothing downloaded), so that ge-hub and ONNX
Runtime run the same file.

    body(i, cond, h [1, 1, H], token [1]):
        x = Reshape(Gather(embedding, token), [1, 1, D])
        h' = GRU(x, h)                                   (one step, linear_before_reset)
        token' = ArgMax(Gemm(Reshape(h', [1, H]), W_out, b_out), axis 1)  [1]
    fixed:  M = steps, no condition; the tokens are a scan output [steps, 1]
    eos:    M = steps and the condition token' != EOS (early exit); the tokens are
            written into a carried [steps] buffer (ScatterElements at i), so every shape
            is static and the exit point is data

`python -m bench.decode_models [--variant fixed|eos] [--steps N] [--hidden H]
[--rounds R] [--threads T]` prints ge-hub's and ONNX Runtime's median latency over R
runs of the same file, the number of iterations run, whether the outputs agree, and
ge-hub's summary().
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

VOCAB = 1000
EMBED = 128


def greedy_decoder(*, variant: str = "fixed", steps: int = 32, hidden: int = 256,
                   eos: int = -1, seed: int = 0) -> bytes:
    """The decoder as a serialized ONNX model (opset 17). Inputs `h0` [1, 1, hidden],
    `token0` int64 [1]; outputs `h` [1, 1, hidden], `token` [1] and `tokens` ([steps, 1]
    for "fixed", a [steps] buffer, -1 past the exit, for "eos")."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    if variant not in ("fixed", "eos"):
        raise ValueError(f"variant must be 'fixed' or 'eos', got {variant!r}")
    rng = np.random.default_rng(seed)
    h = hidden

    def weight(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    inits = [
        numpy_helper.from_array(weight(VOCAB, EMBED, scale=1.0), "embedding"),
        numpy_helper.from_array(weight(1, 3 * h, EMBED, scale=EMBED ** -0.5), "W"),
        numpy_helper.from_array(weight(1, 3 * h, h, scale=h ** -0.5), "R"),
        numpy_helper.from_array(weight(1, 6 * h, scale=0.1), "B"),
        numpy_helper.from_array(weight(h, VOCAB, scale=h ** -0.5 * 3), "W_out"),
        numpy_helper.from_array(weight(VOCAB, scale=0.1), "b_out"),
        numpy_helper.from_array(np.array([1, 1, EMBED], np.int64), "x_shape"),
        numpy_helper.from_array(np.array([1, h], np.int64), "h_shape"),
        numpy_helper.from_array(np.array(steps, np.int64), "M"),
    ]
    body_nodes = [
        helper.make_node("Gather", ["embedding", "tok"], ["emb"], axis=0),
        helper.make_node("Reshape", ["emb", "x_shape"], ["x"]),
        helper.make_node("GRU", ["x", "W", "R", "B", "", "h"], ["", "h_next"],
                         hidden_size=h, linear_before_reset=1),
        helper.make_node("Reshape", ["h_next", "h_shape"], ["hv"]),
        helper.make_node("Gemm", ["hv", "W_out", "b_out"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["tok_next"], axis=1, keepdims=0),
    ]
    body_inputs = [helper.make_tensor_value_info("i", T.INT64, []),
                   helper.make_tensor_value_info("c", T.BOOL, []),
                   helper.make_tensor_value_info("h", T.FLOAT, [1, 1, h]),
                   helper.make_tensor_value_info("tok", T.INT64, [1])]
    body_outputs = [helper.make_tensor_value_info("c_out", T.BOOL, []),
                    helper.make_tensor_value_info("h_next", T.FLOAT, [1, 1, h]),
                    helper.make_tensor_value_info("tok_next", T.INT64, [1])]
    loop_inputs = ["M", "" if variant == "fixed" else "go", "h0", "token0"]
    outputs = [helper.make_tensor_value_info("h", T.FLOAT, [1, 1, h]),
               helper.make_tensor_value_info("token", T.INT64, [1])]
    if variant == "fixed":
        body_nodes.append(helper.make_node("Identity", ["c"], ["c_out"]))
        body_nodes.append(helper.make_node("Identity", ["tok_next"], ["scanned"]))
        body_outputs.append(helper.make_tensor_value_info("scanned", T.INT64, [1]))
        outputs.append(helper.make_tensor_value_info("tokens", T.INT64, [steps, 1]))
    else:
        body_inputs.append(helper.make_tensor_value_info("buf", T.INT64, [steps]))
        body_nodes += [
            helper.make_node("Equal", ["tok_next", "eos"], ["is_eos"]),
            helper.make_node("Not", ["is_eos"], ["going"]),
            helper.make_node("Reshape", ["going", "scalar_shape"], ["c_out"]),
            helper.make_node("Reshape", ["i", "one_shape"], ["at"]),
            helper.make_node("ScatterElements", ["buf", "at", "tok_next"], ["buf_next"],
                             axis=0),
        ]
        inits += [numpy_helper.from_array(np.zeros(0, np.int64), "scalar_shape"),
                  numpy_helper.from_array(np.array([1], np.int64), "one_shape"),
                  numpy_helper.from_array(np.array(True), "go"),
                  numpy_helper.from_array(np.array([eos], np.int64), "eos"),
                  numpy_helper.from_array(np.full(steps, -1, np.int64), "empty_tokens")]
        body_outputs.append(helper.make_tensor_value_info("buf_next", T.INT64, [steps]))
        loop_inputs.append("empty_tokens")
        outputs.append(helper.make_tensor_value_info("tokens", T.INT64, [steps]))
    body = helper.make_graph(body_nodes, "decode_step", body_inputs, body_outputs)
    loop = helper.make_node("Loop", loop_inputs, ["h", "token", "tokens"], body=body)
    graph = helper.make_graph(
        [loop], f"greedy_decoder_{variant}",
        [helper.make_tensor_value_info("h0", T.FLOAT, [1, 1, h]),
         helper.make_tensor_value_info("token0", T.INT64, [1])],
        outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def feeds(hidden: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"h0": rng.standard_normal((1, 1, hidden)).astype(np.float32),
            "token0": np.array([3], np.int64)}


def eos_decoder(steps: int, hidden: int, exit_at: int) -> tuple[bytes, int]:
    """The "eos" decoder with EOS set to a token the fixed decoder first emits at
    iteration `exit_at` (so the loop ends early there), and that EOS."""
    import onnxruntime as ort

    fixed = greedy_decoder(variant="fixed", steps=steps, hidden=hidden)
    session = ort.InferenceSession(fixed, providers=["CPUExecutionProvider"])
    tokens = session.run(None, feeds(hidden))[2].reshape(-1).tolist()
    firsts = {}
    for k, t in enumerate(tokens):
        firsts.setdefault(t, k)
    eos = min(firsts, key=lambda t: (abs(firsts[t] - exit_at), t))
    return greedy_decoder(variant="eos", steps=steps, hidden=hidden, eos=eos), eos


def _median_ms(run, rounds: int) -> float:
    for _ in range(3):
        run()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(model_bytes: bytes, hidden: int, rounds: int, threads: int) -> dict:
    import onnxruntime as ort

    import ge_hub

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    feed = feeds(hidden)
    want = session.run(None, feed)
    path = f"/tmp/ge_hub_decode_{os.getpid()}.onnx"
    with open(path, "wb") as f:
        f.write(model_bytes)
    try:
        model = ge_hub.compile(path)
    finally:
        os.unlink(path)
    got = model.run(feed)
    agree = all(np.array_equal(g, w) if g.dtype.kind == "i" else
                np.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))
    names = [i.name for i in session.get_inputs()]
    order = [feed[n] for n in names]
    ge_ms = _median_ms(lambda: model.run(feed), rounds)
    ort_ms = _median_ms(lambda: session.run(None, dict(zip(names, order))), rounds)
    summary = model.summary()
    return {"ge_hub_ms": round(ge_ms, 3), "ort_ms": round(ort_ms, 3),
            "ratio": round(ge_ms / ort_ms, 3), "outputs_agree": bool(agree),
            "tokens": np.asarray(got[2]).reshape(-1).tolist(),
            "summary": {k: summary[k] for k in ("steps", "python_steps", "python_ops",
                                                "fallback_steps", "specialized_on",
                                                "folded_steps", "cached_plans")}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=("fixed", "eos"), default="fixed")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--exit-at", type=int, default=20,
                        help="eos variant: the iteration the loop should end at")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("GE_HUB_NUM_THREADS", str(args.threads))
    if args.variant == "fixed":
        model, eos = greedy_decoder(steps=args.steps, hidden=args.hidden), None
    else:
        model, eos = eos_decoder(args.steps, args.hidden, args.exit_at)
    result = {"variant": args.variant, "steps": args.steps, "hidden": args.hidden,
              "threads": args.threads, "eos": eos,
              **measure(model, args.hidden, args.rounds, args.threads)}
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
