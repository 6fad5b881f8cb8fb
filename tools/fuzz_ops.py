"""Differential fuzzing of ktune.ops on a GPU (and of torch's own norms
with ktune.torch_norms installed): random calls (shapes, dtypes,
layouts, storage offsets, optional inputs, gradients asked of a random
subset) against a float64 reference, each case twice (the first call may
run a stand-in while its key tunes in the background; the second, later,
the winner). Every input sits in a larger buffer whose other bytes are
checked untouched. A call ktune refuses must raise KtuneError, never
another error; one it takes must match the reference.

    python3 tools/fuzz_ops.py [SECONDS] [SEED] [WAIT]

runs new cases for SECONDS (default 60), from SEED (default: the time;
a list of seeds, comma-separated: those cases alone),
then waits up to WAIT seconds (default 300) for the background tunings
before the second pass.

Prints one line a failing case (enough to rebuild it: its seed) and ends
with "N cases, N refused, N failed"; exit status 1 when any failed."""
import math
import os
import random
import sys
import traceback

import torch

_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_here, "python"))
sys.path.insert(1, os.path.join(_here, "..", "tests", "python"))
sys.path.insert(2, _here)
import fuzz_seeds  # noqa: E402
import ktune  # noqa: E402
from ktune import ops  # noqa: E402
from test_ops import ref_norm  # noqa: E402  (the GPU tests' float64 norm)

DT = [torch.bfloat16, torch.float16, torch.float32]
TOL = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}
DS = [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 100, 127, 128, 129, 255, 256, 257, 500, 511, 512, 513,
      999, 1000, 1024, 1025, 1536, 2047, 2048, 2049, 3000, 4095, 4096, 4104, 5000, 5120, 6000, 8191, 8192, 8200,
      12288, 16384, 16392, 20000]
TS = [0, 1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 33, 64, 100, 127, 131, 132, 133, 255, 263, 264, 265, 500, 1000, 1031,
      2048, 4099]


class Bad(Exception):
    pass


def guarded(rng, shape, dtype, fill):
    """A tensor of shape inside a larger buffer (a storage offset of a few
    elements, maybe unaligned; maybe strided: the transpose of a
    contiguous block), with the buffer and the view; the bytes around are
    a pattern, checked later."""
    n = math.prod(shape)
    lead = rng.choice([0, 0, 1, 3, 8])
    layout = rng.choice(["contiguous", "contiguous", "offset", "strided"]) if len(shape) >= 2 else "contiguous"
    pad = 64
    buf = torch.full((lead + n + pad,), 7.0 if dtype.is_floating_point else 7, device="cuda", dtype=dtype)
    if layout == "strided" and n:
        rows, D = math.prod(shape[:-1]), shape[-1]
        core = buf[lead:lead + n].view(D, rows)
        core.copy_(fill(D, rows))
        return buf, core.t().unflatten(0, tuple(shape[:-1])), (lead, n, buf.clone())
    if layout == "offset":
        lead = lead or 1
    t = buf[lead:lead + n].view(shape)
    if n:
        t.copy_(fill(*shape))
    return buf, t, (lead, n, buf.clone())


def untouched(name, buf, span, inplace=False):
    """buf as it was filled: all of it (an input), or all but the tensor
    itself (one written in place)."""
    lead, n, was = span
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[buf.element_size()]
    same = buf.view(as_int) == was.view(as_int)  # bit for bit: NaNs too
    if inplace:
        same[lead:lead + n] = True
    if not bool(same.all()):
        i = int((~same).nonzero()[0])
        raise Bad("%s: element %d of its buffer changed (the tensor spans [%d, %d))" % (name, i, lead, lead + n))


def close(name, got, want, atol, rtol):
    if got is None or want is None:
        if (got is None) != (want is None):
            raise Bad("%s: %s where the reference has %s" % (name, got is None and "None" or "a tensor",
                                                             want is None and "None" or "a tensor"))
        return
    if tuple(got.shape) != tuple(want.shape):
        raise Bad("%s: shape %s, reference %s" % (name, tuple(got.shape), tuple(want.shape)))
    g, w = got.detach().double(), want.detach().double()
    bad = ~((g - w).abs() <= atol + rtol * w.abs())
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise Bad("%s: %d of %d differ; first [%d] %.6g vs %.6g" % (name, int(bad.sum()), bad.numel(), i,
                                                                    g.flatten()[i], w.flatten()[i]))


def norm_case(rng):
    rms = rng.random() < 0.5
    T, D = rng.choice(TS), rng.choice(DS) if rng.random() < 0.8 else rng.randint(1, 20000)
    dt = rng.choice(DT)
    wdt = dt if rng.random() < 0.8 else rng.choice(DT)
    bdt = wdt if rng.random() < 0.9 else rng.choice(DT)
    has_w, has_b = rng.random() < 0.75, (not rms) and rng.random() < 0.6
    has_r, ret_r = rng.random() < 0.3, rng.random() < 0.3
    groups = 1
    if not rms and rng.random() < 0.2:
        groups = rng.choice([g for g in (1, 2, 3, 4, 8, 16) if D % g == 0])
    eps = rng.choice([1e-5, 1e-6, 1e-3])
    lead = [T] if rng.random() < 0.6 else ([1, T] if rng.random() < 0.5 else [T, 1])
    shape = lead + [D]
    wants = {k: rng.random() < 0.6 for k in ("x", "r", "w", "b")}
    desc = dict(rms=rms, shape=shape, dt=str(dt)[6:], wdt=str(wdt)[6:], bdt=str(bdt)[6:], w=has_w, b=has_b,
                r=has_r, ret_r=ret_r, groups=groups, eps=eps, grads=[k for k, v in wants.items() if v])
    return desc, lambda: run_norm(rng, rms, shape, dt, wdt, bdt, has_w, has_b, has_r, ret_r, groups, eps, wants)


def run_norm(rng, rms, shape, dt, wdt, bdt, has_w, has_b, has_r, ret_r, groups, eps, wants):
    D, T = shape[-1], math.prod(shape[:-1])
    bufs = []

    def make(name, shp, dtype, fill):
        buf, t, span = guarded(rng, shp, dtype, fill)
        bufs.append((name, buf, span))
        return t

    x = make("x", shape, dt, lambda *s: torch.randn(*s, device="cuda"))
    r = make("residual", shape, dt, lambda *s: torch.randn(*s, device="cuda")) if has_r else None
    w = make("weight", [D], wdt, lambda *s: torch.rand(*s, device="cuda") + 0.5) if has_w else None
    b = make("bias", [D], bdt, lambda *s: torch.randn(*s, device="cuda")) if has_b else None
    dy = torch.randn(*shape, device="cuda", dtype=dt)
    ins = [(k, t) for k, t in (("x", x), ("r", r), ("w", w), ("b", b)) if t is not None]
    # leaves that keep the tensors' layouts (a clone would make them dense)
    leaves = {k: (t.detach().requires_grad_(True) if wants[k] else t) for k, t in ins}
    xs, rs, ws, bs = (leaves.get(k) for k in ("x", "r", "w", "b"))
    if rms:
        out = ops.rms_norm(xs, ws, eps, residual=rs, return_residual=ret_r)
    else:
        out = ops.layer_norm(xs, ws, bs, eps, residual=rs, return_residual=ret_r, groups=groups)
    y, hret = out if ret_r else (out, None)
    asked = [k for k, t in ins if wants[k]]
    grads = torch.autograd.grad(y, [leaves[k] for k in asked], dy, allow_unused=True) if asked and T and D else []
    torch.cuda.synchronize()
    for name, buf, span in bufs:
        untouched(name, buf, span)
    x64 = {k: t.detach().double().requires_grad_(wants[k]) for k, t in ins}
    # x + residual as the forward stores it (rounded to x's dtype), which it
    # normalises and the backward reads back
    h64 = (x64["x"] + x64["r"]).to(dt).double() if has_r else x64["x"]
    y64 = ref_norm(h64, x64.get("w"), x64.get("b"), eps, rms, groups)
    tol = max(TOL[dt], TOL[wdt] if has_w else 0, TOL[bdt] if has_b else 0)
    close("y", y, y64, tol, tol)
    if ret_r:
        close("x + residual", hret, h64, TOL[dt], TOL[dt])
    if grads:
        want = torch.autograd.grad(y64, [x64[k] for k in asked], dy.double(), allow_unused=True)
        # dx is rstd times a difference of terms of dy * w's size, which
        # cancel where a group is short or nearly constant, and x - mean
        # loses |x| / std of its bits in f32: an f32 rounding comes out
        # rstd * (1 + |x| * rstd) times larger (an f32 emulation of rows of
        # two: 0.1% of 4M elements past the allowance without the second
        # factor, none with it)
        hs = h64.detach().reshape(-1, groups, D // groups)
        rstd = torch.rsqrt(((hs * hs).mean(-1) if rms else hs.var(-1, unbiased=False)) + eps)
        gmax = (dy.double() * (x64["w"].detach() if has_w else 1)).reshape(-1, groups, D // groups).abs().amax(-1)
        slack = 64 * 2.0 ** -24 * gmax * rstd * (1 + hs.abs().amax(-1) * rstd)
        slack = slack.repeat_interleave(D // groups, -1).reshape(shape)
        for k, g, g64 in zip(asked, grads, want):
            s = 1 + (T ** 0.5 if k in ("w", "b") else 0)
            g64 = g64 if g64 is not None else torch.zeros_like(x64[k])
            if k in ("x", "r"):
                close("d" + k, g, g64, tol + slack, tol)
            else:
                close("d" + k, g, g64, tol * s, tol)


def permute_case(rng):
    N = rng.choice([0, 1, 2, 3, 5, 64, 100, 1000, 4099])
    D = rng.choice([0, 1, 2, 3, 8, 63, 64, 100, 1000, 4096, 5000]) if rng.random() < 0.9 else rng.randint(1, 9000)
    dt = rng.choice(DT)
    M = rng.choice([0, 1, N, 2 * N, N + 3]) if N else rng.choice([0, 1, 3])
    probs = rng.random() < 0.5
    bad = rng.random() < 0.1
    desc = dict(N=N, D=D, M=M, dt=str(dt)[6:], probs=probs, bad=bad)
    return desc, lambda: run_permute(rng, N, D, M, dt, probs, bad)


def run_permute(rng, N, D, M, dt, probs, bad):
    x = torch.randn(N, D, device="cuda").to(dt).requires_grad_(True)
    # each row named at most once, so that the backward is a scatter
    rows = list(range(N))
    rng.shuffle(rows)
    m = [rows[j] if j < N else -1 for j in range(M)]
    if bad and M:
        m[rng.randrange(M)] = rng.choice([-5, N, N + 7, 2 ** 31 - 1])
    rm = torch.tensor(m, device="cuda", dtype=rng.choice([torch.int32, torch.int64]))
    p = torch.rand(N, device="cuda", requires_grad=True) if probs else None
    out, pout = ops.permute_rows(x, rm, p)
    dout = torch.randn(M, D, device="cuda").to(dt)
    js = torch.tensor([j for j, i in enumerate(m) if 0 <= i < N], device="cuda", dtype=torch.long)
    src = torch.tensor([i for i in m if 0 <= i < N], device="cuda", dtype=torch.long)
    want = torch.zeros(M, D, device="cuda", dtype=dt)
    want[js] = x.detach()[src]
    close("out", out, want, 0, 0)
    if probs:
        pw = torch.zeros(M, device="cuda")
        pw[js] = p.detach()[src]
        close("probs_out", pout, pw, 0, 0)
    ins = [x] + ([p] if probs else [])
    outs, gouts = [out], [dout]
    if probs:
        dpo = torch.randn(M, device="cuda")
        outs.append(pout)
        gouts.append(dpo)
    if M and D:
        gs = torch.autograd.grad(outs, ins, gouts, allow_unused=True)
        dx = torch.zeros(N, D, device="cuda", dtype=dt)
        dx[src] = dout[js]
        close("dx", gs[0], dx, 0, 0)
        if probs:
            dp = torch.zeros(N, device="cuda")
            dp[src] = dpo[js]
            close("dprobs", gs[1] if gs[1] is not None else torch.zeros(N, device="cuda"), dp, 0, 0)


def softmax_case(rng):
    L = rng.choice([1, 2, 3, 7, 31, 32, 33, 100, 128, 129, 500, 1000, 1024, 2000, 4096, 5000, 8192, 10000])
    R = rng.choice([0, 1, 2, 3, 7, 64, 100, 131, 1000])
    dt = rng.choice(DT)
    mask = rng.choice([None, "bool", "uint8", "float"])
    bias = rng.random() < 0.5
    scale = rng.choice([1.0, 0.125, 2.0, -1.0])
    desc = dict(R=R, L=L, dt=str(dt)[6:], mask=mask, bias=bias, scale=scale)
    return desc, lambda: run_softmax(rng, R, L, dt, mask, bias, scale)


def run_softmax(rng, R, L, dt, mask, bias, scale):
    bufs = []
    buf, x, span = guarded(rng, [R, L], dt, lambda *s: torch.randn(*s, device="cuda"))
    bufs.append(("x", buf, span))
    m = None
    if mask:
        keep = torch.rand(R, L, device="cuda") < 0.7
        if R > 1:
            keep[rng.randrange(R)] = False  # a row fully masked: all zeros
        m = keep if mask == "bool" else keep.to(torch.uint8) if mask == "uint8" else keep.float()
    bi = torch.randn(R, L, device="cuda").to(dt) if bias else None
    xs = x.detach().requires_grad_(True)
    y = ops.masked_softmax(xs, m, bi, scale)
    torch.cuda.synchronize()
    for name, b, s in bufs:
        untouched(name, b, s)
    z = scale * x.double() + (bi.double() if bias else 0)
    if mask:
        z = z.masked_fill(m == 0, float("-inf"))
    want = torch.softmax(z, -1)
    want = torch.nan_to_num(want, nan=0.0)
    close("y", y, want, TOL[dt], TOL[dt])
    if R and L:
        dy = torch.randn(R, L, device="cuda").to(dt)
        (g,) = torch.autograd.grad(y, [xs], dy)
        yd = want
        dz = yd * (dy.double() - (dy.double() * yd).sum(-1, keepdim=True))
        close("dx", g, dz * scale, TOL[dt] * 4, TOL[dt] * 4)


def inplace_case(rng):
    T, D = rng.choice(TS), rng.choice(DS)
    dt = rng.choice(DT)
    has_w = rng.random() < 0.7
    desc = dict(T=T, D=D, dt=str(dt)[6:], w=has_w)
    return desc, lambda: run_inplace(rng, T, D, dt, has_w)


def run_inplace(rng, T, D, dt, has_w):
    buf, x, span = guarded(rng, [T, D], dt, lambda *s: torch.randn(*s, device="cuda"))
    x0 = x.detach().double().clone()
    w = (torch.rand(D, device="cuda") + 0.5).to(dt) if has_w else None
    ops.rms_norm_(x, w, 1e-6)
    torch.cuda.synchronize()
    untouched("x", buf, span, inplace=True)
    close("x", x, ref_norm(x0, w.double() if has_w else None, None, 1e-6, True, 1), TOL[dt], TOL[dt])


def aten_case(rng):
    rms = rng.random() < 0.5
    T, D = rng.choice(TS), rng.choice(DS)
    split = rng.random() < 0.3 and D % 2 == 0
    norm_shape = [2, D // 2] if split else [D]
    dt = rng.choice(DT)
    wdt = dt if not rms or rng.random() < 0.8 else rng.choice(DT)  # RMSNorm's other dtypes: torch's own code
    has_w, has_b = rng.random() < 0.75, (not rms) and rng.random() < 0.6
    eps = rng.choice([None, 1e-5, 1e-6]) if rms else rng.choice([1e-5, 1e-6])
    wants = {k: rng.random() < 0.6 for k in ("x", "w", "b")}
    desc = dict(aten=True, rms=rms, shape=[T] + norm_shape, dt=str(dt)[6:], wdt=str(wdt)[6:], w=has_w, b=has_b,
                eps=eps, grads=[k for k, v in wants.items() if v])
    return desc, lambda: run_aten(rng, rms, [T] + norm_shape, norm_shape, dt, wdt, has_w, has_b, eps, wants)


def run_aten(rng, rms, shape, norm_shape, dt, wdt, has_w, has_b, eps, wants):
    """F.rms_norm and F.layer_norm with ktune.torch_norms installed: torch's
    own operators run by ktune's kernels (or torch's code where they do
    not take the call)."""
    from ktune import torch_norms
    torch_norms.install()  # for this case alone: ops' calls go through it while it is installed
    try:
        aten_calls(rng, rms, shape, norm_shape, dt, wdt, has_w, has_b, eps, wants)
    finally:
        torch_norms.uninstall()


def aten_calls(rng, rms, shape, norm_shape, dt, wdt, has_w, has_b, eps, wants):
    import torch.nn.functional as F
    D, T = math.prod(norm_shape), shape[0]
    bufs = []
    buf, x, span = guarded(rng, shape, dt, lambda *s: torch.randn(*s, device="cuda"))
    bufs.append(("x", buf, span))
    w = (torch.rand(*norm_shape, device="cuda") + 0.5).to(wdt) if has_w else None
    b = torch.randn(*norm_shape, device="cuda").to(wdt) if has_b else None
    ins = [(k, t) for k, t in (("x", x), ("w", w), ("b", b)) if t is not None]
    leaves = {k: (t.detach().requires_grad_(True) if wants[k] else t) for k, t in ins}
    xs, ws, bs = (leaves.get(k) for k in ("x", "w", "b"))
    y = F.rms_norm(xs, norm_shape, ws, eps) if rms else F.layer_norm(xs, norm_shape, ws, bs, eps)
    dy = torch.randn(*shape, device="cuda").to(dt)
    asked = [k for k, t in ins if wants[k]]
    grads = torch.autograd.grad(y, [leaves[k] for k in asked], dy, allow_unused=True) if asked and T else []
    torch.cuda.synchronize()
    for name, bb, sp in bufs:
        untouched(name, bb, sp)
    x64 = {k: t.detach().double().requires_grad_(wants[k]) for k, t in ins}
    h = x64["x"].reshape(T, D)
    e = eps if eps is not None else 1.1920928955078125e-07  # the float epsilon, which both compute in
    y64 = ref_norm(h, x64["w"].reshape(D) if has_w else None, x64["b"].reshape(D) if has_b else None, e, rms, 1)
    y64 = y64.reshape(shape)
    tol = max(TOL[dt], TOL[wdt] if has_w or has_b else 0)
    close("y", y, y64, tol, tol)
    if grads:
        want = torch.autograd.grad(y64, [x64[k] for k in asked], dy.double(), allow_unused=True)
        for k, g, g64 in zip(asked, grads, want):
            s = 1 + (T ** 0.5 if k in ("w", "b") else 0)
            close("d" + k, g, g64 if g64 is not None else torch.zeros_like(x64[k]), tol * s * 4, tol)


CASES = [(norm_case, 6), (aten_case, 2), (permute_case, 2), (softmax_case, 2), (inplace_case, 1)]


def attempt(kind, seed, desc, when):
    """Run one case (built again from its seed): None when it matched,
    "refused" when ktune refused it (a failure when it had taken it
    before), else the failure, printed."""
    torch.manual_seed(seed)
    try:
        kind(random.Random(seed))[1]()
        return None
    except ktune.KtuneError as e:
        if when == "first":
            print("refused %s %d %s: %s" % (kind.__name__, seed, desc, str(e).splitlines()[0][:300]))
            return "refused"
        why = "refused now: %s" % e
    except Bad as e:
        why = str(e)
    except Exception:  # noqa: BLE001 - any other error is a failure of the package
        why = traceback.format_exc(limit=4).replace("\n", " | ")
    print("FAILED %s %d (%s) %s: %s" % (kind.__name__, seed, when, desc, why))
    return why


def main():
    run = fuzz_seeds.Run(sys.argv[1:3], CASES)
    wait = float(sys.argv[3]) if len(sys.argv) > 3 else 300
    refused, failed, later = 0, 0, []
    for seed, kind in run:
        desc = kind(random.Random(seed))[0]
        err = attempt(kind, seed, desc, "first")
        if err == "refused":
            refused += 1
        elif err:
            failed += 1
        else:
            later.append((seed, kind, desc))
    # the same cases again, now that their keys' tunings have had time
    try:
        ktune.wait_tuning(wait)
    except ktune.KtuneError as e:
        print("tunings still running after %g s: %s" % (wait, e))
    for seed, kind, desc in later:
        failed += attempt(kind, seed, desc, "again") is not None
    return run.close(refused, failed)


if __name__ == "__main__":
    sys.exit(main())
