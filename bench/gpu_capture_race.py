"""Probes what happens when one thread captures a CUDA graph while another thread works
on the same GPU: the situation of two threads running one rlxpy executable with CUDA
graphs (issue 8's race). Each scenario reports what each thread saw, without rlxpy.

  both_capture: A holds a capture open (torch.cuda.graph on its default capture stream);
                B begins a capture of its own the same way (their second runs coincide).
  eager_during: A holds a capture open; B launches an ordinary kernel and synchronizes
                (B's first run, or an autotuning benchmark).

For each: did B's work run (its result), did A's capture succeed, and does A's graph,
replayed afterwards, compute the right thing.

    python bench/gpu_capture_race.py      # on a GPU machine
"""
import threading

import torch


def scenario(name: str, b_captures: bool) -> None:
    x = torch.ones(1 << 20, device="cuda")
    started, release = threading.Event(), threading.Event()
    report = {}

    def thread_a():
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                x.mul_(2.0)
                started.set()
                release.wait(timeout=10)          # hold the capture open while B works
            x.fill_(1.0)
            g.replay()
            torch.cuda.synchronize()
            report["A capture"] = "ok"
            report["A replay right"] = bool((x == 2.0).all())
        except Exception as e:
            started.set()
            report["A capture"] = f"failed: {str(e).splitlines()[0]}"

    def thread_b():
        started.wait(timeout=10)
        try:
            if b_captures:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, capture_error_mode="thread_local"):
                    pass
                report["B capture"] = "ok"
            y = torch.zeros(4, device="cuda")
            y.add_(1.0)
            torch.cuda.synchronize()
            report["B eager work ran"] = y.tolist() == [1.0] * 4
        except Exception as e:
            report["B"] = f"failed: {str(e).splitlines()[0]}"
        finally:
            release.set()

    ta, tb = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    ta.start()
    tb.start()
    ta.join()
    tb.join()
    torch.cuda.synchronize()
    print(f"{name}: " + "; ".join(f"{k}: {v}" for k, v in report.items()))


def main() -> None:
    scenario("both_capture", b_captures=True)
    scenario("eager_during", b_captures=False)


if __name__ == "__main__":
    main()
