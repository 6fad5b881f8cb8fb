"""What a framework sees per call from Python (run by `make bench` when torch
imports):
  1. small norms (T=4, D=4096, bf16) on a cache hit: the ktune operators,
     the kernel handle, torch.nn.functional's, forward plus autograd
     backward on each side (and each half alone: the forward under
     autograd, the backward through a kept graph), the same for torch's
     own kernels behind a Python autograd.Function (as ktune.ops's are),
     an empty Function's forward plus backward, ktune's kernels under
     torch's own C++ nodes (ktune.torch_norms installed: ktune.ops routed
     there, and torch.nn.functional's calls), a frozen LayerNorm's backward
     alone (weight and bias needing no gradient) on each side, and a Triton
     @autotune kernel; wall time per call over 5000 back-to-back calls (2000
     where autograd runs), the stream synchronized at the end;
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
from ktune import ops, torch_norms  # noqa: E402

try:
    import triton
    import triton.language as tl
except Exception:  # Triton is optional
    triton = None


def burst_us(fn, n):
    """Wall time per call over n back-to-back calls, one synchronize."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


def interleaved_us(calls, rounds=5):
    """For each (fn, n) in calls, the median over rounds of burst_us(fn, n),
    the rounds taken in turn (a round of each, then the next): a host whose
    speed drifts over the minutes of a run moves every row alike, not the
    rows timed last. A call (fn, n, True) runs with ktune.torch_norms
    installed, the others without (switched between bursts, untimed)."""
    for c in calls:
        _torch_norms(c)
        for _ in range(50):
            c[0]()
    torch.cuda.synchronize()
    res = [[] for _ in calls]
    for _ in range(rounds):
        for c, r in zip(calls, res):
            _torch_norms(c)
            r.append(burst_us(c[0], c[1]))
    _torch_norms((None, 0))
    return [statistics.median(r) for r in res]


def _torch_norms(call):
    """ktune.torch_norms installed for a call that asks for it, else not."""
    on = len(call) > 2 and call[2]
    if on != torch_norms.installed():
        torch_norms.install() if on else torch_norms.uninstall()


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


def _python_functions(D):
    """RMSNorm and LayerNorm as Python autograd.Functions around torch's own
    forward and backward kernels (None where this torch lacks them), and a
    Function that runs no kernel: a forward returning a view, a backward
    passing dy on."""
    aten = torch.ops.aten

    class Rms(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            y, rstd = aten._fused_rms_norm(x, [D], w, 1e-6)
            ctx.save_for_backward(x, w, rstd)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, rstd = ctx.saved_tensors
            return tuple(aten._fused_rms_norm_backward(dy, x, [D], rstd, w, [True, True]))

    class Ln(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            y, mean, rstd = aten.native_layer_norm(x, [D], w, b, 1e-5)
            ctx.save_for_backward(x, w, b, mean, rstd)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, b, mean, rstd = ctx.saved_tensors
            return tuple(aten.native_layer_norm_backward(dy, x, [D], mean, rstd, w, b, [True, True, True]))

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, dy):
            return dy

    rms = Rms.apply if hasattr(aten, "_fused_rms_norm_backward") else None
    return rms, Ln.apply, Empty.apply


def _aten_ready():
    """Whether ktune.torch_norms installs here (it says why where not)."""
    try:
        torch_norms.install()
        torch_norms.uninstall()
        return True
    except ktune.KtuneError as e:
        print("ktune.torch_norms rows skipped: %s" % e)
        return False


def _aten_rows(fwds, xg, w, b, dy, both, halves):
    """Rows of ktune's kernels under torch's own C++ autograd nodes
    (ktune.torch_norms), added to both (forward + backward) and halves:
    ktune.ops routed there, and torch's functional ops themselves."""
    D = xg.shape[-1]
    for name, (kt_fwd, th_fwd, _) in fwds.items():
        both.append(("%s forward + backward, ktune.ops through torch's nodes (ktune.torch_norms)" % name,
                     lambda fwd=kt_fwd: fwd().backward(dy), 2000, True))
        both.append(("%s forward + backward, torch.nn.functional with ktune.torch_norms installed" % name,
                     lambda fwd=th_fwd: fwd().backward(dy), 2000, True))
        halves.append(("%s forward under autograd, ktune.ops through torch's nodes (ktune.torch_norms)"
                       % name, kt_fwd, 2000, True))
        halves.append(("%s forward under autograd, torch.nn.functional with ktune.torch_norms installed"
                       % name, th_fwd, 2000, True))
        out = th_fwd()
        halves.append(("%s backward alone, torch.nn.functional with ktune.torch_norms installed" % name,
                       lambda out=out: out.backward(dy, retain_graph=True), 2000, True))
    # A frozen norm (weight and bias need no gradient): dx alone, on each
    # side; ktune's kernels then sum nothing and launch once.
    frozen = F.layer_norm(xg, (D,), w, b, 1e-5)
    halves.append(("layer_norm backward alone, frozen weight and bias, torch",
                   lambda: frozen.backward(dy, retain_graph=True), 2000))
    halves.append(("layer_norm backward alone, frozen weight and bias, torch.nn.functional with "
                   "ktune.torch_norms installed", lambda: frozen.backward(dy, retain_graph=True), 2000, True))


def host_costs(dev):
    """Per-call wall time of the norms from Python at T=4, D=4096 bf16: the
    operators, the kernel handle (C launch path and ctypes path), torch's
    functional ops, and a forward plus autograd backward on each side."""
    T, D = 4, 4096
    x = torch.randn(T, D, device=dev, dtype=torch.bfloat16)
    w = torch.rand(D, device=dev, dtype=torch.bfloat16) + 0.5
    b = torch.randn(D, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    rt = ktune.runtime()
    k = rt.kernel("layernorm_fwd")
    y = torch.empty_like(x)
    nb = ktune.null(torch.bfloat16)
    raw = [y, x, None, nb, w, nb, None, None, T, D, 1, 1e-6, 1]
    ops.rms_norm(x, w, 1e-6)
    ops.layer_norm(x, w, b, 1e-5)
    k.launch(raw)  # the first launch installs the C path where it was built
    fast = "launch" in vars(k)  # the instance's own launch: the C path
    xg, wg, bg = (t.detach().requires_grad_(True) for t in (x, w, b))

    # Each side's forward under autograd; a row times it followed by its
    # backward, then each half alone: the forward (its graph freed when the
    # output is dropped), and the backward through a graph kept
    # (retain_graph), so that no forward runs between the calls. The third
    # side is torch's own kernels behind a Python autograd.Function, as
    # ktune.ops's are: what autograd's Python layer costs any library whose
    # backward is not a C++ node.
    nat_rms, nat_ln, empty_fn = _python_functions(D)
    fwds = {"rms_norm": (lambda: ops.rms_norm(xg, wg, 1e-6), lambda: F.rms_norm(xg, (D,), wg, 1e-6),
                         nat_rms and (lambda: nat_rms(xg, wg))),
            "layer_norm": (lambda: ops.layer_norm(xg, wg, bg, 1e-5), lambda: F.layer_norm(xg, (D,), wg, bg, 1e-5),
                           nat_ln and (lambda: nat_ln(xg, wg, bg)))}
    sides = ("ktune", "torch", "torch's kernels in a Python autograd.Function")
    both, halves = [], []
    for name, fns in fwds.items():
        present = [(side, fwd) for side, fwd in zip(sides, fns) if fwd is not None]
        for side, fwd in present:
            both.append(("%s forward + backward, %s" % (name, side), lambda fwd=fwd: fwd().backward(dy), 2000))
        for side, fwd in present:
            halves.append(("%s forward under autograd, %s" % (name, side), fwd, 2000))
        for side, fwd in present:
            out = fwd()
            halves.append(("%s backward alone, %s" % (name, side),
                           lambda out=out: out.backward(dy, retain_graph=True), 2000))
    both.append(("forward + backward of an empty Python autograd.Function (no kernel)",
                 lambda: empty_fn(xg).backward(dy), 2000))
    aten = _aten_ready()
    if aten:
        _aten_rows(fwds, xg, w, b, dy, both, halves)

    calls = [("ktune.ops.rms_norm", lambda: ops.rms_norm(x, w, 1e-6), 5000),
             ("torch.nn.functional.rms_norm", lambda: F.rms_norm(x, (D,), w, 1e-6), 5000),
             ("ktune.ops.layer_norm", lambda: ops.layer_norm(x, w, b, 1e-5), 5000),
             ("torch.nn.functional.layer_norm", lambda: F.layer_norm(x, (D,), w, b, 1e-5), 5000),
             ("kernel handle, %s" % ("C launch path (ktune._fastcall)" if fast else "ctypes path (C path not built)"),
              lambda: k.launch(raw), 5000),
             ("kernel handle, ctypes path", lambda: k._slow_launch(raw, None, None), 5000)] + both + halves
    if aten:
        calls += [("torch.nn.functional.rms_norm with ktune.torch_norms installed",
                   lambda: F.rms_norm(x, (D,), w, 1e-6), 5000, True),
                  ("torch.nn.functional.layer_norm with ktune.torch_norms installed",
                   lambda: F.layer_norm(x, (D,), w, b, 1e-5), 5000, True)]
    if triton is not None:
        x1, w1 = x[:1], w
        calls.append(("Triton @autotune RMSNorm kernel (cache hit, T = 1)",
                      lambda: triton_rmsnorm(x1, w1, 1e-6), 2000))
    rows = list(zip([c[0] for c in calls], interleaved_us([c[1:] for c in calls])))
    print("\nper-call host cost from Python, T=4 D=4096 bf16 (wall time per call over 5000 back-to-back calls, "
          "2000 with backward; median of 5 rounds, one synchronize a round, the rows' rounds in turn)")
    print("| call | µs per call |")
    print("| --- | ---: |")
    for name, t in rows:
        print("| %s | %.1f |" % (name, t))
    return rt


def main():
    dev = "cuda"
    rt = host_costs(dev)

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
        eager = interleaved_us([(kt_block, n), (th_block, n)])
        print("| %dx%d | %.1f | %.1f | %.1f | %.1f |" % (T, D, eager[0], eager[1], graph_time_us(kt_block),
                                                         graph_time_us(th_block)))
        if diff > 0.1:
            print("  (outputs differ: max |ktune - torch| = %.3g)" % diff)
    st = rt.stats()
    print("\nktune stats: %(launches)d launches, %(hits)d hits, %(misses)d misses, %(tunings)d tunings, "
          "%(fallbacks)d fallbacks" % st)


if __name__ == "__main__":
    main()
