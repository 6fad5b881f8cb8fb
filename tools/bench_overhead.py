"""What a framework sees per call from Python (run by `make bench` when torch
imports):
  1. a small RMSNorm (T=1, D=4096, bf16) on a cache hit: the ktune operator,
     torch.nn.functional.rms_norm, and a Triton @autotune kernel; wall time
     per call over 2000 back-to-back calls, the stream synchronized at the end;
  2. a model block (residual add + RMSNorm + token permutation), ktune
     against PyTorch, eager and as a replayed CUDA graph."""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
import ktune  # noqa: E402
from bench_kernels import graph_time_us  # noqa: E402
from ktune import ops  # noqa: E402

try:
    import triton
    import triton.language as tl
except Exception:  # Triton is optional
    triton = None


def wall_us(fn, n=2000, rounds=5):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        res.append((time.perf_counter() - t0) * 1e6 / n)
    return statistics.median(res)


if triton is not None:
    @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096) for w in (4, 8)],
                     key=["D"])
    @triton.jit
    def _tl_rmsnorm(Y, X, W, D, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, D, BLOCK):
            x = tl.load(X + row * D + off + cols, mask=off + cols < D, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / D + eps)
        for off in range(0, D, BLOCK):
            m = off + cols < D
            x = tl.load(X + row * D + off + cols, mask=m, other=0.0).to(tl.float32)
            w = tl.load(W + off + cols, mask=m, other=0.0).to(tl.float32)
            tl.store(Y + row * D + off + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=m)

    def triton_rmsnorm(x, w, eps):
        y = torch.empty_like(x)
        _tl_rmsnorm[(x.shape[0],)](y, x, w, x.shape[1], eps)
        return y


def main():
    dev = "cuda"
    x = torch.randn(1, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.rand(4096, device=dev, dtype=torch.bfloat16) + 0.5
    rt = ktune.runtime()
    k = rt.kernel("layernorm_fwd")
    y = torch.empty_like(x)
    raw = [y, x, None, ktune.null(torch.bfloat16), w, ktune.null(torch.bfloat16), None, None, 1, 4096, 1, 1e-6, 1]
    rows = [("ktune operator (ktune.ops.rms_norm)", wall_us(lambda: ops.rms_norm(x, w, 1e-6))),
            ("ktune kernel handle (Kernel.launch)", wall_us(lambda: k.launch(raw))),
            ("torch.nn.functional.rms_norm", wall_us(lambda: F.rms_norm(x, (4096,), w, 1e-6)))]
    if triton is not None:
        rows.append(("Triton @autotune kernel (cache hit)", wall_us(lambda: triton_rmsnorm(x, w, 1e-6))))
    else:
        rows.append(("Triton @autotune kernel", float("nan")))
    print("\nper-call wall time from Python, RMSNorm T=1 D=4096 bf16 (2000 calls, median of 5 rounds)")
    print("| call | µs per call |")
    print("| --- | ---: |")
    for name, t in rows:
        print("| %s | %.1f |" % (name, t))

    # Model block: h = x + res; y = rmsnorm(h) * w; out = y[map].
    print("\nmodel block: residual add + RMSNorm + permutation, bf16 (eager: wall per call; graph: GPU per replay)")
    print("| T x D | ktune eager µs | torch eager µs | ktune graph µs | torch graph µs |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for T, D in ((1, 4096), (128, 4096), (4096, 4096), (16384, 2048)):
        xb = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
        rb = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
        wb = torch.rand(D, device=dev, dtype=torch.bfloat16) + 0.5
        mp = torch.randperm(T, device=dev, dtype=torch.int32)
        mpl = mp.long()

        def kt_block():
            yy, hh = ops.rms_norm(xb, wb, 1e-6, residual=rb, return_residual=True)
            return ops.permute_rows(yy, mp)[0], hh

        def th_block():
            hh = xb + rb
            return F.rms_norm(hh, (D,), wb, 1e-6).index_select(0, mpl), hh

        got, want = kt_block(), th_block()
        torch.cuda.synchronize()
        diff = (got[0].float() - want[0].float()).abs().max().item()
        n = 300 if T * D > 1 << 24 else 2000
        print("| %dx%d | %.1f | %.1f | %.1f | %.1f |" % (T, D, wall_us(kt_block, n), wall_us(th_block, n),
                                                         graph_time_us(kt_block), graph_time_us(th_block)))
        if diff > 0.1:
            print("  (outputs differ: max |ktune - torch| = %.3g)" % diff)
    st = rt.stats()
    print("\nktune stats: %(launches)d launches, %(hits)d hits, %(misses)d misses, %(tunings)d tunings, "
          "%(fallbacks)d fallbacks" % st)


if __name__ == "__main__":
    main()
