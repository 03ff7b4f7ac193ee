"""Every implicit-GEMM tile config, timed alone per conv shape, both layouts of x.

    python bench/triton_configs.py [--batch 32] [--only NAME]

For choosing IGEMM_CONFIGS and the x layout (igemm vs igemm_nchw): prints, per forward case of triton_suite, the
time of the channels-last copy of x and of conv2d_igemm under each config with x read
channels-last (copy not included) or, with --nchw, NCHW in place, against cuDNN (TF32) on the same data.
"""
import argparse
import functools

import torch
import triton
import triton.testing

import rlxpy as rx
from rlxpy.triton import dispatch as D
from rlxpy.triton import kernels as K
from triton_suite import CASES, arena_with_inputs, conv_of

do_bench = functools.partial(triton.testing.do_bench, return_mode="median")
CONFIGS = [(128, 64, 32, 4, 4), (128, 128, 32, 8, 3), (64, 64, 32, 4, 4), (128, 64, 64, 4, 3),
           (64, 128, 32, 4, 4), (128, 128, 32, 4, 3), (256, 64, 32, 8, 3), (64, 32, 32, 4, 4)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--only", default="", help="comma-separated parts of case names")
    ap.add_argument("--nchw", action="store_true", help="also time each config reading NCHW x in place")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = True
    for case in [cs for cs in CASES if any(o in cs.id for o in args.only.split(","))]:
        name, (c, h, k, ks, s, p) = case.id, conv_of(case)
        n = args.batch
        x = torch.randn(n, c, h, h, device="cuda")
        w = torch.randn(k, c, ks, ks, device="cuda") / (c * ks * ks) ** 0.5
        g = rx.Graph()
        g.output("y", g.conv(g.input("x", tuple(x.shape)), g.param("w", w.cpu().numpy()), stride=s, padding=p))
        exe = rx.compile(g, device="cuda")
        bound = arena_with_inputs(exe, {"x": x})
        arena = bound.arena
        launch, th = bound.calls[0]
        geo = th.record.geometry
        oh, ow = geo.y_shape[2:]
        xt = D._scratch(th, arena, (n, h, h, c))
        torch_ms = do_bench(lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p))
        copy_ms = do_bench(lambda: D._channels_last(arena, th.off("x"), xt, n, c, h, h))
        torch_copy_ms = do_bench(lambda: x.permute(0, 2, 3, 1).contiguous())
        print(f"## {name} N={n}: cuDNN {torch_ms * 1e3:.1f} us, channels-last copy {copy_ms * 1e3:.1f} us "
              f"(torch permute().contiguous() {torch_copy_ms * 1e3:.1f} us)", flush=True)
        whole = do_bench(launch)
        print(f"  autotuned launcher, copy included: {whole * 1e3:.1f} us, "
              f"tuned: {list(K.conv2d_igemm_tuned.cache.values())[-1]}", flush=True)
        D._channels_last(arena, th.off("x"), xt, n, c, h, h)
        wk = D._k_major(th, arena)
        y = D.at(arena, th.off("y"))
        alone = do_bench(lambda: D._launch_igemm(xt, wk, y, y, n, c, h, h, k, oh, ow, False, D._geometry(geo)))
        print(f"  autotuned kernel alone: {alone * 1e3:.1f} us", flush=True)
        for bm, bn, bk, nw, ns in CONFIGS:
            row = []
            for nhwc in (True,) + ((False,) if args.nchw else ()):
                grid = (triton.cdiv(n * oh * ow, bm), triton.cdiv(k, bn), 1)
                src = xt if nhwc else D.at(arena, th.off("x"))

                def launch():
                    K.conv2d_igemm[grid](src, wk, y, y, n, c, h, h, k, oh, ow, HAS_BIAS=False, X_NHWC=nhwc,
                                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns,
                                         **D._geometry(geo))
                try:
                    row.append(f"{do_bench(launch) * 1e3:7.1f}")
                except Exception as e:   # a config over the shared-memory limit
                    row.append(f"failed ({type(e).__name__})")
            times = ", ".join(f"{lay} {t} us" for lay, t in zip(("nhwc", "nchw"), row))
            print(f"  {bm}x{bn}x{bk} w{nw} s{ns}: {times}", flush=True)


if __name__ == "__main__":
    main()
