"""Whole CNNs end to end: rlxpy (the ONNX import of each model) against onnxruntime and
PyTorch eager, side by side in one process, batch 1 and 8, default flags.

    python bench/models.py [--reps 10] [--only resnet18,unet] [--batches 1,8] [--rounds 20]

The models are tests/cnn_models.py's (random weights), exported by PyTorch's TorchScript
exporter with a dynamic batch. Ratios are peer time / rlxpy time (> 1: rlxpy faster).
--rounds R prints, after the table, onnxruntime/rlxpy as R rounds of a block of 10 calls
each (the two alternating which goes first, a pause before each block) and the median of
the per-round ratios: this machine's speed drifts by up to 40% over minutes, and a ratio
taken within one round is steadier than the ratio of two medians over the whole run.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import rlxpy as rx  # noqa: E402
from conv_suite import cpu_header, geomean, time_blocks  # noqa: E402
from cnn_models import MODELS, export  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=0, help="also onnxruntime/rlxpy, round by round (see above)")
    args = ap.parse_args(argv)

    import onnx
    import onnxruntime as ort
    import torch
    threads = rx.compile(rx.onnx.load(onnx.load_from_string(export("audio1d")[0]))).threads
    torch.set_num_threads(threads)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    print(cpu_header(threads))
    print(f"# rlxpy {rx.__version__}, torch {torch.__version__}, onnxruntime {ort.__version__}")
    print("| model | batch | rlx ms | ort ms | torch ms | ort/rlx | torch/rlx | arena MiB | max err / scale |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {"ort": [], "torch": []}
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    for name in names:
        data, module = export(name)
        exe = rx.compile(rx.onnx.load(onnx.load_from_string(data)))
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        for n in (int(b) for b in args.batches.split(",")):
            x = np.random.default_rng(0).standard_normal((n,) + MODELS[name][1][1:]).astype(np.float32)
            xt = torch.from_numpy(x)

            def torch_run():
                with torch.inference_mode():
                    module(xt)
            ms = time_blocks({"rlx": lambda: exe.run({"input": x}), "ort": lambda: sess.run(None, {"input": x}),
                              "torch": torch_run}, args.reps)
            out, ref = exe.run({"input": x})["output"], sess.run(None, {"input": x})[0]
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            arena = exe.plan().arena_bytes / 2 ** 20
            ratios["ort"].append(ms["ort"] / ms["rlx"])
            ratios["torch"].append(ms["torch"] / ms["rlx"])
            print(f"| {name} | {n} | {ms['rlx']:.2f} | {ms['ort']:.2f} | {ms['torch']:.2f} | "
                  f"{ms['ort'] / ms['rlx']:.2f} | {ms['torch'] / ms['rlx']:.2f} | {arena:.1f} | {err:.1e} |")
    print(f"\ngeomean ort/rlx {geomean(ratios['ort']):.2f}, torch/rlx {geomean(ratios['torch']):.2f}; "
          f"min ort/rlx {min(ratios['ort']):.2f}")
    for name in names if args.rounds else ():
        data, _ = export(name)
        exe = rx.compile(rx.onnx.load(onnx.load_from_string(data)))
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        for n in (int(b) for b in args.batches.split(",")):
            x = np.random.default_rng(0).standard_normal((n,) + MODELS[name][1][1:]).astype(np.float32)
            q = round_ratios(lambda: exe.run({"input": x}), lambda: sess.run(None, {"input": x}), args.rounds)
            print(f"{name} batch {n}: ort/rlx by rounds, median {q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})")


def round_ratios(rlx, peer, rounds, block=10):
    """Quartiles of peer/rlxpy over `rounds` rounds, each a block of calls of both (medians)."""
    import statistics
    import time
    ratios = []
    for r in range(rounds):
        med = {}
        for key, fn in (("rlx", rlx), ("peer", peer)) if r % 2 == 0 else (("peer", peer), ("rlx", rlx)):
            time.sleep(0.05)
            fn()
            fn()
            ts = []
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
            med[key] = statistics.median(ts)
        ratios.append(med["peer"] / med["rlx"])
    return np.percentile(ratios, [25, 50, 75])


if __name__ == "__main__":
    main()
