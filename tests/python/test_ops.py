"""GPU tests of the PyTorch integration (tools/python/ktune), run by
`make gpu-test` when torch imports. Prints "N passed, N failed, N skipped"."""
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "python"))
import ktune  # noqa: E402
from ktune import ops  # noqa: E402

results = {"passed": 0, "failed": 0, "skipped": 0}
TESTS = []


class Skip(Exception):
    pass


def test(fn):
    TESTS.append(fn)
    return fn


def ref_norm(x, w, b, eps, rms, groups=1):
    """float64 reference, differentiable."""
    D = x.shape[-1]
    xs = x.reshape(-1, groups, D // groups)
    if rms:
        y = xs * torch.rsqrt((xs * xs).mean(-1, keepdim=True) + eps)
    else:
        mu = xs.mean(-1, keepdim=True)
        y = (xs - mu) * torch.rsqrt(((xs - mu) ** 2).mean(-1, keepdim=True) + eps)
    y = y.reshape(x.shape)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def close(name, got, want, atol, rtol):
    got, want = got.double(), want.double()
    bad = ~((got - want).abs() <= atol + rtol * want.abs())
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError("%s: %d of %d elements differ; first [%d]: %.6g vs reference %.6g"
                             % (name, int(bad.sum()), bad.numel(), i, got.flatten()[i], want.flatten()[i]))


@test
def norm_gradients_match_float64():
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [  # T, D, groups, dtype, rms, residual, weight, bias
        (450, 256, 1, torch.bfloat16, True, True, True, False),
        (7, 1000, 4, torch.float32, False, False, True, True),
        (100, 2048, 1, torch.float16, False, True, True, True),
        (33, 64, 1, torch.float32, True, False, False, False),
        # a wave of rows (programs of two rows, the last of one) over long rows
        (sms + 1, 16384, 1, torch.bfloat16, False, False, True, True),
        (sms, 6000, 1, torch.float16, True, True, True, False),
        # long rows over half as many programs (MG = 2 where clusters run)
        (3 * sms + 5, 8192, 1, torch.bfloat16, False, True, True, True),
        (2 * sms + 7, 12288, 1, torch.float16, True, False, True, False),
        # one row, or a few short ones: layernorm_bwd_row writes dw and db
        # itself (no reduce), its blocks' or clusters' sums met in f32
        (1, 4096, 1, torch.bfloat16, False, True, True, True),
        (2, 4096, 1, torch.bfloat16, False, True, True, True),
        (3, 1000, 1, torch.float16, True, True, True, False),
        (4, 2048, 1, torch.float32, False, False, True, True),
        (1, 1000, 4, torch.float16, False, False, True, True),
        (1, 16384, 1, torch.bfloat16, True, False, True, False),
        (1, 64, 1, torch.float32, True, False, False, False),
        (1, 6000, 1, torch.float32, False, False, False, True),
        (13, 1000, 1, torch.bfloat16, False, True, True, True),
        (9, 256, 1, torch.float16, True, False, True, False),
        (100, 96, 1, torch.bfloat16, False, False, True, True),
        (2, 8192, 1, torch.bfloat16, True, True, True, False),
        # no weight, no bias: no partial rows, a quarter of the rows' programs
        # (up to 16 an SM), ragged against them
        (5001, 1000, 1, torch.bfloat16, False, True, False, False),
        (20011, 256, 1, torch.float16, True, False, False, False),
        (600, 4104, 1, torch.float32, True, False, False, False),
    ]
    assert ktune.norm_bwd_one_program(13, 1000, 1) and ktune.norm_bwd_one_program(100, 96, 1)
    assert not ktune.norm_bwd_one_program(4, 4096, 1) and not ktune.norm_bwd_one_program(7, 1000, 4)
    assert ktune.norm_programs(3 * sms + 5, sms, 8192, True) == sms // 2
    assert ktune.norm_programs(3 * sms + 5, sms, 4096, True) == sms
    assert ktune.norm_programs(3 * sms + 5, sms, 8192, False) == sms
    assert ktune.norm_programs(sms + 1, sms, 16384, True) == -(-(sms + 1) // 2)
    assert ktune.norm_programs(20011, sms, 256, sums=False) == 16 * sms
    assert ktune.norm_programs(5001, sms, 1000, sums=False) == max(sms, 1250)
    for T, D, G, dt, rms, has_res, has_w, has_b in cases:
        x = torch.randn(T, D, device="cuda", dtype=dt, requires_grad=True)
        r = torch.randn(T, D, device="cuda", dtype=dt, requires_grad=True) if has_res else None
        w = (torch.rand(D, device="cuda", dtype=dt) + 0.5).requires_grad_(True) if has_w else None
        b = torch.randn(D, device="cuda", dtype=dt, requires_grad=True) if has_b else None
        dy = torch.randn(T, D, device="cuda", dtype=dt)
        if rms:
            y = ops.rms_norm(x, w, 1e-5, residual=r)
        else:
            y = ops.layer_norm(x, w, b, 1e-5, residual=r, groups=G)
        ins = [t for t in (x, r, w, b) if t is not None]
        grads = torch.autograd.grad(y, ins, dy)
        ins64 = [t.detach().double().requires_grad_(True) for t in ins]
        it = iter(ins64)
        x64 = next(it)
        r64 = next(it) if has_res else None
        w64 = next(it) if has_w else None
        b64 = next(it) if has_b else None
        h64 = x64 + r64 if has_res else x64
        y64 = ref_norm(h64, w64, b64, 1e-5, rms, G)
        g64 = torch.autograd.grad(y64, ins64, dy.double())
        tol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}[dt]
        close("y %s" % ((T, D, G, dt, rms),), y, y64, tol, tol)
        names = ["dx", "dres", "dw", "db"]
        names = [n for n, t in zip(names, (x, r, w, b)) if t is not None]
        for n, g, want in zip(names, grads, g64):
            scale = 1 + (T ** 0.5 if n in ("dw", "db") else 0)
            close("%s %s" % (n, (T, D, G, dt, rms)), g, want, tol * scale, tol)


@test
def a_frozen_weight_is_read_and_its_gradient_never_summed():
    """A weight (or bias) that needs no gradient, through ktune.ops and
    through torch's nodes (ktune.torch_norms): dx (and db) match float64,
    the frozen tensor gets no .grad, and with no sum left the backward is one
    launch (no reduce): on one program, on P programs, and on programs that
    merge blocks (long rows)."""
    from ktune import torch_norms
    torch.manual_seed(3)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bf, f16 = torch.bfloat16, torch.float16
    cases = [  # T, D, dtype, rms, bias, the bias needs its gradient
        (4, 4096, bf, False, True, False), (4, 4096, bf, False, True, True), (3000, 1024, f16, False, True, True),
        (2000, 4096, bf, True, False, False), (3 * sms + 5, 8192, bf, False, True, True),
        (5001, 1000, f16, False, True, False),
    ]
    for installed in (False, True):
        (torch_norms.install if installed else torch_norms.uninstall)()
        try:
            for T, D, dt, rms, has_b, need_b in cases:
                tag = "%s (%d, %d) %s rms=%s bias=%s/%s" % ("torch_norms" if installed else "ops", T, D, dt, rms,
                                                             has_b, need_b)
                x = torch.randn(T, D, device="cuda", dtype=dt, requires_grad=True)
                w = torch.rand(D, device="cuda", dtype=dt) + 0.5  # frozen
                b = torch.randn(D, device="cuda", dtype=dt).requires_grad_(need_b) if has_b and not rms else None
                dy = torch.randn(T, D, device="cuda", dtype=dt)
                _poison()
                n0 = _launches()
                if installed:
                    y = F.rms_norm(x, (D,), w, 1e-5) if rms else F.layer_norm(x, (D,), w, b, 1e-5)
                else:
                    y = ops.rms_norm(x, w, 1e-5) if rms else ops.layer_norm(x, w, b, 1e-5)
                y.backward(dy)
                torch.cuda.synchronize()
                sums = b is not None and need_b
                if not sums:
                    assert _launches() == n0 + 2, "%s: %d launches, not the forward and one backward" % (
                        tag, _launches() - n0)
                assert w.grad is None, tag
                x64, w64 = x.detach().double().requires_grad_(True), w.double()
                b64 = b.detach().double().requires_grad_(True) if b is not None else None
                y64 = ref_norm(x64, w64, b64, 1e-5, rms)
                y64.backward(dy.double())
                tol = 5e-3 if dt == f16 else 3e-2
                close("%s dx" % tag, x.grad, x64.grad, tol, tol)
                if b is not None:
                    assert (b.grad is not None) == need_b, tag
                    if need_b:
                        close("%s db" % tag, b.grad, b64.grad, tol * (1 + T ** 0.5), tol)
        finally:
            torch_norms.uninstall()


@test
def permute_and_softmax_gradients():
    torch.manual_seed(1)
    x = torch.randn(500, 300, device="cuda", requires_grad=True)
    p = torch.rand(500, device="cuda", requires_grad=True)
    m = torch.randperm(500, device="cuda", dtype=torch.int32)
    out, po = ops.permute_rows(x, m, p)
    close("permute", out, x[m.long()], 0, 0)
    close("probs", po, p[m.long()], 0, 0)
    g, gp = torch.autograd.grad((out * 3).sum() + (po * 2).sum(), (x, p))
    close("dx", g, torch.full_like(x, 3), 0, 0)
    close("dprobs", gp, torch.full_like(p, 2), 0, 0)
    s = torch.randn(64, 1001, device="cuda", requires_grad=True)
    mask = torch.rand(64, 1001, device="cuda") < 0.8
    y = ops.masked_softmax(s, mask, None, 0.5)
    want = torch.softmax((s.double() * 0.5).masked_fill(~mask, float("-inf")), -1)
    close("softmax", y, want, 1e-6, 1e-5)
    dy = torch.randn_like(y)
    (gs,) = torch.autograd.grad(y, s, dy)
    s64 = s.detach().double().requires_grad_(True)
    (w64,) = torch.autograd.grad(torch.softmax((s64 * 0.5).masked_fill(~mask, float("-inf")), -1), s64, dy.double())
    close("dsoftmax", gs, w64, 1e-5, 1e-4)


@test
def torch_compile_uses_the_ops():
    torch.manual_seed(2)
    w = torch.rand(512, device="cuda") + 0.5

    def block(x, r, m):
        y, h = ops.rms_norm(x, w, 1e-6, residual=r, return_residual=True)
        out, _ = ops.permute_rows(y, m)
        return out, h

    x = torch.randn(300, 512, device="cuda")
    r = torch.randn(300, 512, device="cuda")
    m = torch.randperm(300, device="cuda", dtype=torch.int32)
    want = block(x, r, m)
    got = torch.compile(block, fullgraph=True)(x, r, m)
    # The compiled graph goes through the operator that also saves rstd for
    # a backward: another key, tuned on its own, whose config may sum the
    # row in another order. x + r is one add whatever the config.
    close("compiled out", got[0], want[0], 1e-6, 1e-5)
    close("compiled h", got[1], want[1], 0, 0)


@test
def cuda_graph_replays_cached_key_and_never_tunes_in_capture():
    rt = ktune.runtime()
    torch.manual_seed(3)
    w = torch.rand(768, device="cuda") + 0.5
    x = torch.randn(64, 768, device="cuda")
    ops.rms_norm(x, w)  # eager: the key is tuned here (in the background: wait for it)
    ktune.wait_tuning()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    before = rt.stats()
    with torch.cuda.graph(g):
        y = ops.rms_norm(x, w)
        z = ops.rms_norm(x[:, :640].contiguous(), w[:640])  # a key never seen: no tuning
    after = rt.stats()
    assert after["tunings"] == before["tunings"], "tuned during capture: %s -> %s" % (before, after)
    assert after["async_queued"] == before["async_queued"], "queued during capture: %s -> %s" % (before, after)
    assert after["fallbacks"] + after["standins"] > before["fallbacks"] + before["standins"], \
        "the unseen key did not fall back"
    for i in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        close("replay %d" % i, y, ref_norm(x.double(), w.double(), None, 1e-6, True), 1e-4, 1e-4)
        close("replay %d (default config)" % i, z,
              ref_norm(x[:, :640].double(), w[:640].double(), None, 1e-6, True), 1e-4, 1e-4)


@test
def small_backward_is_one_launch_eager_and_two_in_a_capture():
    """At up to NORM_ONE_PROGRAM_MAX elements an eager backward launches
    layernorm_bwd_row alone (the host's cost is what an eager caller waits
    on); a graph's capture keeps the backward and its reduce where those are
    faster on the GPU (4 rows of 4096). The two agree with float64."""
    rt = ktune.runtime()
    torch.manual_seed(8)
    T, D = 4, 4096
    assert T * D == ktune.NORM_ONE_PROGRAM_MAX and not ktune.norm_bwd_one_program(T, D, 1)
    assert ktune.norm_bwd_one_program(T, D, 1, True) and not ktune.norm_bwd_one_program(T + 1, D, 1, True)
    x = torch.randn(T, D, device="cuda", dtype=torch.float32)
    w = torch.rand(D, device="cuda") + 0.5
    dy = torch.randn_like(x)
    _, _, mean, rstd = ops.norm_fwd(x, None, w, None, 1, 1e-5, False, False)
    args = (dy, x, w, mean, rstd, None, 1, False, True)
    ops.norm_bwd(*args)  # tuned (in the background) here
    ktune.wait_tuning(300)
    torch.cuda.synchronize()
    n0 = rt.stats()["launches"]
    dx, dw, db = ops.norm_bwd(*args)
    n1 = rt.stats()["launches"]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        gx, gw, gb = ops.norm_bwd(*args)
    n2 = rt.stats()["launches"]
    assert (n1 - n0, n2 - n1) == (1, 2), (n1 - n0, n2 - n1)
    g.replay()
    torch.cuda.synchronize()
    x64, w64, b64 = (t.double().requires_grad_(True) for t in (x, w, torch.zeros_like(w)))
    want = torch.autograd.grad(ref_norm(x64, w64, b64, 1e-5, False), (x64, w64, b64), dy.double())
    names = ("dx eager", "dw eager", "db eager", "dx captured", "dw captured", "db captured")
    for name, got, ref in zip(names, (dx, dw, db, gx, gw, gb), want + want):
        close(name, got, ref, 1e-4, 1e-4)


@test
def first_call_never_waits_and_the_winner_lands():
    """The ops' runtime is in async mode: a new key launches a stand-in at
    once, is tuned in the background, and wait_tuning() lets it land."""
    rt = ktune.runtime()
    torch.manual_seed(6)
    x = torch.randn(96, 1280, device="cuda")
    w = torch.rand(1280, device="cuda") + 0.5
    before = rt.stats()
    y = ops.rms_norm(x, w)
    torch.cuda.synchronize()
    close("stand-in", y, ref_norm(x.double(), w.double(), None, 1e-6, True), 1e-4, 1e-4)
    mid = rt.stats()
    assert mid["standins"] == before["standins"] + 1 and mid["async_queued"] == before["async_queued"] + 1, mid
    ktune.wait_tuning(300)
    after = rt.stats()
    assert after["async_done"] == before["async_done"] + 1 and after["async_pending"] == 0, after
    y = ops.rms_norm(x, w)
    torch.cuda.synchronize()
    close("winner", y, ref_norm(x.double(), w.double(), None, 1e-6, True), 1e-4, 1e-4)


@test
def in_place_and_aliasing():
    torch.manual_seed(4)
    x = torch.randn(200, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(1024, device="cuda", dtype=torch.bfloat16) + 0.5
    want = ref_norm(x.double(), w.double(), None, 1e-6, True)
    ops.rms_norm_(x, w, 1e-6)  # first call of this key: tuned on scratch, x written once
    close("in place", x, want, 3e-2, 3e-2)
    # The permutation's spec refuses in place: the error names the params.
    m = torch.randperm(200, device="cuda", dtype=torch.int32)
    k = ktune.runtime().kernel("permute_rows")
    try:
        k.launch([x, x, m, None, None, 200, 200, 1024])
    except ktune.KtuneError as e:
        assert e.status == "KT_ERR_ALIAS", e.status
        assert "out" in str(e) and "in" in str(e), str(e)
    else:
        raise AssertionError("permute_rows in place was not refused")


@test
def sixteen_threads_launch_while_one_tunes():
    torch.manual_seed(5)
    D = 1536
    w = torch.rand(D, device="cuda") + 0.5
    warm = torch.randn(8, D, device="cuda")
    ops.rms_norm(warm, w)
    torch.cuda.synchronize()
    errors = []

    def worker(i):
        try:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for it in range(30):
                    x = torch.randn(16 + i, D, device="cuda")
                    y = ops.rms_norm(x, w)
                    s.synchronize()
                    close("thread %d iter %d" % (i, it), y, ref_norm(x.double(), w.double(), None, 1e-6, True),
                          1e-4, 1e-4)
        except Exception as e:  # reported by the main thread
            errors.append("thread %d: %s" % (i, e))

    def tuner():
        try:
            x = torch.randn(64, 2560, device="cuda")
            w2 = torch.rand(2560, device="cuda")
            y = ops.layer_norm(x, w2, None, 1e-5)
            torch.cuda.synchronize()
            close("tuning thread", y, ref_norm(x.double(), w2.double(), None, 1e-5, False), 1e-4, 1e-4)
        except Exception as e:
            errors.append("tuner: %s" % e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)] + [threading.Thread(target=tuner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "; ".join(errors[:3])


@test
def mode_in_effect():
    """Runtime.mode is the runtime's own answer: the mode asked for, else
    the one $KTUNE_MODE names when it opens, else tune."""
    old = os.environ.get("KTUNE_MODE")
    d = tempfile.mkdtemp()
    try:
        for env, asked, want in (("cache-only", None, "cache-only"), ("fast", None, "tune"), ("off", "async", "async"),
                                 (None, None, "tune"), ("async", "default", "async")):
            if env is None:
                os.environ.pop("KTUNE_MODE", None)
            else:
                os.environ["KTUNE_MODE"] = env
            rt = ktune.Runtime(0, mode=asked, cache_path=os.path.join(d, "m.db"), log=lambda level, msg: None)
            try:
                assert rt.mode == want, (env, asked, rt.mode)
            finally:
                rt.close()
    finally:
        if old is None:
            os.environ.pop("KTUNE_MODE", None)
        else:
            os.environ["KTUNE_MODE"] = old
        shutil.rmtree(d)


@test
def stats_and_log_callback():
    lines = []
    rt = ktune.Runtime(0, log=lambda level, msg: lines.append((level, msg)), log_level="info")
    try:
        k = rt.kernel("masked_softmax")
        x = torch.randn(100, 333, device="cuda")
        y = torch.empty_like(x)
        for _ in range(5):
            k.launch([y, x, None, ktune.null(torch.float32), 100, 333, 1.0])
        torch.cuda.synchronize()
        st = rt.stats()
        assert st["launches"] == 5 and st["misses"] == 1, st
        assert st["hits"] >= 4, st
        assert st["tunings"] + st["cache_loads"] == 1, st
        if st["tunings"]:
            assert any("tuned masked_softmax" in m for _, m in lines), lines[-3:]
    finally:
        rt.close()


def _norm_case(shape, dtype, wdtype, rms, res, wb, groups):
    D = shape[-1]
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    r = torch.randn(*shape, device="cuda", dtype=dtype) if res else None
    w = torch.rand(D, device="cuda", dtype=wdtype) + 0.5 if "w" in wb else None
    b = torch.randn(D, device="cuda", dtype=wdtype) if "b" in wb else None
    return (x, r, w, b, groups, 1e-5, rms, res)


def _same(name, got, want):
    if got is None or want is None:
        assert got is None and want is None, name
        return
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
    assert torch.equal(got, want), "%s: the C and Python bodies differ" % name


def _grads(apply, args, dy):
    ins = [t.detach().clone().requires_grad_(True) if t is not None else None for t in args[:4]]
    y, h = apply(*ins, *args[4:])
    y.backward(dy)
    return [y, h] + [t.grad if t is not None else None for t in ins]


def compare_c_and_python_bodies():
    """The body of c_bodies_match_the_python_bodies, in a process of its own
    with KTUNE_MODE=off: every launch takes its key's default config, so the
    two paths run the same variant (a tuning landing between them would
    not)."""
    torch.manual_seed(11)
    bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    cases = [_norm_case(shape, dt, wdt, rms, res, wb, g)
             for shape, dt, wdt, g in [((4, 4096), bf, bf, 1), ((2, 3, 1000), f16, f32, 1), ((300, 5120), bf, bf, 1),
                                       ((9, 768), bf, bf, 4)]
             for rms in (True, False) for res in (False, True) for wb in ("w", "wb", "")
             if not (rms and "b" in wb) and not (rms and g > 1)]
    for i, c in enumerate(cases):
        dy = torch.randn_like(c[0])
        tag = "case %d %s %s rms=%s res=%s w=%s b=%s" % (i, tuple(c[0].shape), c[0].dtype, c[6], c[1] is not None,
                                                          c[2] is not None, c[3] is not None)
        for name, a, b in zip(("y", "h"), ops._fc.norm_eager(*c), ops._eager_py(*c)):
            _same("%s eager %s" % (tag, name), a, b)
        for name, a, b in zip(("y", "h", "dx", "dres", "dw", "db"), _grads(ops._apply, c, dy),
                              _grads(ops._NormFn.apply, c, dy)):
            _same("%s autograd %s" % (tag, name), a, b)
    x = torch.randn(8, 512, device="cuda", dtype=bf)
    w = torch.rand(512, device="cuda", dtype=bf)
    _same("strided x and weight", ops.rms_norm(x[:, ::2], w[::2]), ops.rms_norm(x[:, ::2].contiguous(),
                                                                               w[::2].contiguous()))
    x, r = (torch.randn(8, 256, device="cuda", requires_grad=True) for _ in range(2))
    y, h = ops.rms_norm(x, None, residual=r, return_residual=True)
    (h * 3).sum().backward()
    assert bool((x.grad == 3).all()) and bool((r.grad == 3).all())
    print("%d cases: the C and Python bodies agree" % len(cases))


@test
def c_bodies_match_the_python_bodies():
    """ktune._fastcall's norm bodies (eager, forward, backward) give what the
    Python bodies give, bit for bit, over dims, dtypes, groups, residuals,
    weights and biases, and both backward plans (one program; P programs
    and a reduce); strided inputs go to the Python body; an output that
    gets no gradient is not materialised."""
    ops.rms_norm(torch.randn(2, 64, device="cuda"))
    if ops._fc is None:
        raise Skip("ktune._fastcall was not built")
    import subprocess
    env = dict(os.environ, KTUNE_MODE="off")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--compare-c-and-python-bodies"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and p.stdout.endswith("the C and Python bodies agree\n"), p.stdout + p.stderr


@test
def batches_of_no_rows():
    """A batch of no rows (a leading dim of 0; its tensors have null
    addresses): the norms' forward, eager and under autograd with a
    residual, give empty outputs, and the backward empty dx and dres and dw
    and db of zeros, as torch does; permute_rows and masked_softmax give
    empty outputs. So do rows of no element (a last dim of 0: torch's
    norms give empty outputs, and x.numel() // D raised). None of it
    launches a kernel."""
    rt = ktune.runtime(0)
    for shape in ((0, 1024), (3, 0, 1024), (4, 0), (2, 3, 0)):
        D = shape[-1]
        for rms in (True, False):
            x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
            w = torch.rand(D, device="cuda", dtype=torch.bfloat16)
            b = None if rms else torch.rand(D, device="cuda", dtype=torch.bfloat16)
            n = rt.stats()["launches"]
            y = ops.rms_norm(x, w) if rms else ops.layer_norm(x, w, b)
            assert y.shape == x.shape and y.dtype == x.dtype, (y.shape, y.dtype)
            xg, wg, rg = (t.clone().requires_grad_(True) for t in (x, w, torch.randn_like(x)))
            bg = b.clone().requires_grad_(True) if b is not None else None
            y, h = (ops.rms_norm(xg, wg, residual=rg, return_residual=True) if rms else
                    ops.layer_norm(xg, wg, bg, residual=rg, return_residual=True))
            (y.float().sum() + h.float().sum()).backward()
            assert xg.grad.shape == x.shape and rg.grad.shape == x.shape
            assert wg.grad is not None and wg.grad.shape == (D,) and not bool(wg.grad.any()), wg.grad
            assert bg is None or (bg.grad is not None and not bool(bg.grad.any())), bg.grad
            ops.rms_norm_(x, w, 1e-6)
            assert rt.stats()["launches"] == n, (shape, rms, rt.stats()["launches"] - n)
    out, _ = ops.permute_rows(torch.randn(0, 64, device="cuda"), torch.zeros(0, dtype=torch.int32, device="cuda"))
    assert out.shape == (0, 64)
    for shape in ((2, 0, 128), (4, 0), (2, 3, 0)):
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
        assert ops.masked_softmax(x).shape == shape
        xg = x.clone().requires_grad_(True)
        ops.masked_softmax(xg, bias=torch.zeros_like(x)).float().sum().backward()
        assert xg.grad.shape == shape


@test
def a_residual_sum_is_normalised_as_it_is_stored():
    """With a residual, the forward normalises x + residual rounded to x's
    dtype: what it returns, what the backward reads back, and what torch's
    x + residual followed by the norm gives. Sums that round to one value
    make a row of equal values, normalised to exactly the bias; a row of one
    element has dw of exactly 0, and dx and dresidual of 0 but for
    roundings. (Statistics of the unrounded
    sums left a rounding in x - mean, which rstd magnifies up to
    1 / sqrt(eps).)"""
    torch.manual_seed(0)
    for dt in (torch.bfloat16, torch.float16):
        for T, D in ((5, 64), (300, 1000)):
            x = torch.ones(T, D, device="cuda", dtype=dt)
            r = ((torch.rand(T, D, device="cuda") - 0.5) * 2 ** -11).to(dt)  # 1 + r rounds to 1
            assert bool(((x + r) == 1).all()) and bool((r != 0).any())
            w = torch.rand(D, device="cuda", dtype=dt) + 0.5
            b = torch.randn(D, device="cuda", dtype=dt)
            for grad in (False, True):
                xs = x.detach().requires_grad_(grad)
                y, h = ops.layer_norm(xs, w, b, 1e-5, residual=r, return_residual=True)
                assert torch.equal(h, x + r), dt
                assert torch.equal(y, b.expand(T, D)), (dt, T, D, grad, float((y.float() - b.float()).abs().max()))
                assert torch.equal(y, F.layer_norm(x + r, (D,), w, b, 1e-5)), (dt, T, D)
        for T in (7, 1031):
            x = torch.randn(T, 1, device="cuda", dtype=dt, requires_grad=True)
            r = torch.randn(T, 1, device="cuda", dtype=dt, requires_grad=True)
            w = (torch.rand(1, device="cuda", dtype=dt) + 0.5).requires_grad_(True)
            b = torch.randn(1, device="cuda", dtype=dt, requires_grad=True)
            for eps in (1e-6, 1e-3):
                y = ops.layer_norm(x, w, b, eps, residual=r)
                assert torch.equal(y, b.detach().expand(T, 1)), (dt, T, eps)
                dy = torch.randn(T, 1, device="cuda", dtype=dt)
                dx, dr, dw, db = torch.autograd.grad(y, (x, r, w, b), dy)
                # x - mean is exactly 0, so dw is; dx and dresidual keep
                # rstd times the rounding of dy * w that a fused multiply-add
                # leaves (about 1e-6), where statistics of the unrounded
                # sum gave values in the thousands
                assert not dw.any(), (dt, T, eps, float(dw.float().abs().max()))
                close("dx", dx, torch.zeros_like(dx), 1e-3, 0)
                close("dresidual", dr, torch.zeros_like(dr), 1e-3, 0)
                close("db", db, dy.double().sum(0), 1e-2 * T ** 0.5, 1e-2)


@test
def odd_norm_arguments_raise_in_the_packages_words():
    """A weight, a bias or a residual that does not match the rows raises
    (before anything reads past them), naming it, on both paths; so does
    rms_norm_'s weight."""
    x = torch.randn(8, 256, device="cuda")
    cases = [(dict(weight=torch.rand(255, device="cuda")), "ktune.ops: weight has 255 elements on cuda:0; "
              "the rows have 256 on cuda:0"),
             (dict(bias=torch.rand(512, device="cuda")), "ktune.ops: bias has 512 elements on cuda:0; "
              "the rows have 256 on cuda:0"),
             (dict(residual=torch.randn(7, 256, device="cuda")), "ktune.ops: residual has shape (7, 256) on "
              "cuda:0; x has (8, 256) on cuda:0"),
             (dict(weight=torch.rand(256)), "ktune.ops: weight has 256 elements on cpu; the rows have 256 on "
              "cuda:0"),
             # a bias of another dtype than the weight's: refused, never read
             # as the weight's type
             (dict(weight=torch.rand(256, device="cuda"), bias=torch.rand(256, device="cuda", dtype=torch.bfloat16)),
              "layernorm_fwd: arg 5 (b) is bf16, but W=f32 from arg 4 (w)"),
             (dict(weight=torch.rand(256, device="cuda", dtype=torch.float16),
                   bias=torch.rand(256, device="cuda", dtype=torch.bfloat16)),
              "layernorm_fwd: arg 5 (b) is bf16, but W=f16 from arg 4 (w)"),
             (dict(groups=3), "ktune.ops: groups=3 does not split the rows' 256 elements into equal parts"),
             (dict(groups=0), "ktune.ops: groups=0 does not split the rows' 256 elements into equal parts")]
    for kw, want in cases:
        for grad in (False, True):
            try:
                ops.layer_norm(x.detach().requires_grad_(grad), **kw)
            except ktune.KtuneError as e:
                assert str(e).endswith(want), (str(e), want)
            else:
                raise AssertionError("no error for %s" % list(kw))
    # in place: the weight is checked as well (it was read past its end)
    try:
        ops.rms_norm_(x, torch.rand(255, device="cuda"), 1e-6)
    except ktune.KtuneError as e:
        assert str(e) == "ktune.ops: weight has 255 elements on cuda:0; the rows have 256 on cuda:0", str(e)
    else:
        raise AssertionError("no error for rms_norm_'s weight")
    # a scalar, x in place that is not contiguous; the public backward's
    # statistics (any tensors may come: the kernels would read past them)
    h, dy = torch.randn(4, 256, device="cuda"), torch.randn(4, 256, device="cuda")
    f32 = torch.float32
    for f, want in ((lambda: ops.layer_norm(torch.ones((), device="cuda")),
                     "ktune.ops: x is a scalar; a norm is over its last dim"),
                    (lambda: ops.rms_norm_(x[:, :128], None, 1e-6),
                     "ktune.ops: rms_norm_ writes x in place, and x of shape (8, 128) is not contiguous"),
                    (lambda: ops.norm_bwd(dy, h, None, torch.zeros(4, device="cuda"), torch.ones(3, device="cuda"),
                                          None, 1, False, False),
                     "ktune.ops: rstd is float32 of shape (3,) on cuda:0; the backward reads 4 float32s on cuda:0 "
                     "(one a group of a row)"),
                    (lambda: ops.norm_bwd(dy, h, None, torch.zeros(4, device="cuda", dtype=torch.float16),
                                          torch.ones(4, device="cuda"), None, 1, False, False),
                     "ktune.ops: mean is float16 of shape (4,) on cuda:0; the backward reads 4 float32s on cuda:0 "
                     "(one a group of a row)"),
                    (lambda: ops.norm_bwd(dy[:2], h, None, torch.empty(0, device="cuda"),
                                          torch.ones(4, device="cuda", dtype=f32), None, 1, True, False),
                     "ktune.ops: dy has shape (2, 256) on cuda:0; h has (4, 256) on cuda:0")):
        try:
            f()
        except ktune.KtuneError as e:
            assert str(e) == want and e.status == "KT_ERR_ARGS", (str(e), want)
        else:
            raise AssertionError("no error: " + want)


@test
def odd_index_and_softmax_arguments_raise_in_the_packages_words():
    """masked_softmax's mask and bias, permute_rows's map and probs,
    unpermute_rows's map, dprobs and n that do not match the call raise
    (before anything reads past them), naming them, eager and under
    autograd, with nothing launched; a gather from x of no rows and a
    scatter of none give zeros (not what the allocator held), launching
    nothing; map entries of 64 bits outside the rows stay outside; a mask
    of any dtype keeps what is nonzero."""
    rt = ktune.runtime(0)
    x = torch.randn(5, 8, device="cuda")
    m = torch.arange(5, device="cuda", dtype=torch.int32)
    cases = [
        (lambda x: ops.masked_softmax(x, torch.ones(5, 4, dtype=torch.bool, device="cuda")),
         "ktune.ops: mask has shape (5, 4) on cuda:0; x has (5, 8) (the mask and the bias are of x's shape) on cuda:0"),
        (lambda x: ops.masked_softmax(x, None, torch.ones(8, device="cuda")),
         "ktune.ops: bias has shape (8,) on cuda:0; x has (5, 8) (the mask and the bias are of x's shape) on cuda:0"),
        (lambda x: ops.masked_softmax(x, None, torch.ones(5, 8)),
         "ktune.ops: bias has shape (5, 8) on cpu; x has (5, 8) (the mask and the bias are of x's shape) on cuda:0"),
        (lambda x: ops.permute_rows(x, m, torch.ones(4, device="cuda")),
         "ktune.ops: probs has shape (4,) on cuda:0; x has 5 rows on cuda:0"),
        (lambda x: ops.permute_rows(x, m.reshape(5, 1)),
         "ktune.ops: row_map has shape (5, 1) on cuda:0 and x (5, 8) on cuda:0; the map holds one index an output "
         "row (1-D) of x's rows (x has at least one dim)"),
        (lambda x: ops.permute_rows(x, m.cpu()),
         "ktune.ops: row_map has shape (5,) on cpu and x (5, 8) on cuda:0; the map holds one index an output "
         "row (1-D) of x's rows (x has at least one dim)"),
        (lambda x: ops.unpermute_rows(x, m[:4], 5),
         "ktune.ops: row_map has 4 entries, n is 5; unpermute_rows takes one entry a row of dout (5) and n >= 0"),
        (lambda x: ops.unpermute_rows(x, m, -1),
         "ktune.ops: row_map has 5 entries, n is -1; unpermute_rows takes one entry a row of dout (5) and n >= 0"),
        (lambda x: ops.unpermute_rows(x, m, 5, torch.ones(3, device="cuda")),
         "ktune.ops: dprobs has shape (3,) on cuda:0; x has 5 rows on cuda:0"),
        (lambda x: ops.permute_rows(x, m.float()), "ktune.ops: row_map has dtype float32; a row map holds integers"),
        (lambda x: ops.unpermute_rows(x, m > 2, 5), "ktune.ops: row_map has dtype bool; a row map holds integers"),
    ]
    n = rt.stats()["launches"]
    for f, want in cases:
        for grad in (False, True):
            try:
                f(x.detach().requires_grad_(grad))
            except ktune.KtuneError as e:
                assert str(e) == want and e.status == "KT_ERR_ARGS", (str(e), want)
            else:
                raise AssertionError("no error: " + want)
    assert rt.stats()["launches"] == n, rt.stats()["launches"] - n
    _poison()
    out, p = ops.permute_rows(torch.randn(0, 4, device="cuda"), m[:3], torch.ones(0, device="cuda"))
    assert torch.equal(out, torch.zeros(3, 4, device="cuda")) and torch.equal(p, torch.zeros(3, device="cuda")), out
    din, dp = ops.unpermute_rows(torch.randn(0, 4, device="cuda"), m[:0], 3, torch.ones(0, device="cuda"))
    assert torch.equal(din, torch.zeros(3, 4, device="cuda")) and torch.equal(dp, torch.zeros(3, device="cuda")), din
    assert rt.stats()["launches"] == n, rt.stats()["launches"] - n  # nothing to gather or scatter
    # map entries of 64 bits outside the rows stay outside (a cast alone wrapped 2**32 + 1 to 1)
    m64 = torch.tensor([2 ** 32 + 1, 1, -2 ** 32 + 2, 4], device="cuda")
    zero = torch.zeros(8, device="cuda")
    out, _ = ops.permute_rows(x, m64)
    assert torch.equal(out, torch.stack([zero, x[1], zero, x[4]])), out
    back, _ = ops.unpermute_rows(x[:4], m64, 5)
    assert torch.equal(back, torch.stack([zero, x[1], zero, zero, x[3]])), back
    # probs and dprobs strided: the kernels read floats one after another
    pp = torch.arange(10.0, device="cuda").view(5, 2)
    out, p = ops.permute_rows(x, m.flip(0), pp[:, 1])
    assert torch.equal(p, torch.tensor([9.0, 7.0, 5.0, 3.0, 1.0], device="cuda")), p
    _, dp = ops.unpermute_rows(x, m.flip(0), 5, pp[:, 1])
    assert torch.equal(dp, torch.tensor([9.0, 7.0, 5.0, 3.0, 1.0], device="cuda")), dp
    z = torch.tensor([[0.5, 0.0, 2.0, 0.0]], device="cuda")
    want = ops.masked_softmax(z, z != 0)
    for mask in (z, (z * 512).int(), (z * 2).to(torch.int8)):
        assert torch.equal(ops.masked_softmax(z, mask), want), mask


@test
def inputs_laid_out_otherwise_get_gradients_in_their_shapes():
    """A residual of x's elements in another shape, a weight or bias of D
    elements as (1, D), probs of one float a row as (N, 1) and a softmax
    bias of x's elements flattened each get their gradient in their own
    shape (autograd refused one of x's or D's shape), on the C and Python
    bodies, and equal to the gradient of the same inputs in the usual
    shapes; tensors off CUDA are refused by name."""
    torch.manual_seed(5)
    D = 64
    x = torch.randn(4, 3, D, device="cuda")
    r, w, b = torch.randn(12, D, device="cuda"), torch.rand(1, D, device="cuda") + 0.5, torch.randn(1, D, device="cuda")
    dy = torch.randn(4, 3, D, device="cuda")

    def grads(shaped, ret_res):
        ins = [t.detach().clone().requires_grad_(True) for t in (x, r, w, b)]
        xi, ri, wi, bi = ins if shaped else (ins[0], ins[1].view(x.shape), ins[2].view(D), ins[3].view(D))
        out = ops.layer_norm(xi, wi, bi, residual=ri, return_residual=ret_res)
        y = out[0] if ret_res else out
        ((y * dy).sum() + (out[1].sum() if ret_res else 0)).backward()
        return [t.grad for t in ins]

    for ret_res in (False, True):
        got, want = grads(True, ret_res), grads(False, ret_res)
        for name, g, t, v in zip(("x", "residual", "weight", "bias"), got, (x, r, w, b), want):
            assert g.shape == t.shape, (name, g.shape, t.shape)
            close("%s's gradient, return_residual=%s" % (name, ret_res), g, v, 1e-5, 1e-5)
    wr = (torch.rand(1, D, device="cuda") + 0.5).requires_grad_(True)
    ops.rms_norm(x, wr).sum().backward()
    assert wr.grad.shape == (1, D), wr.grad.shape
    s = torch.randn(5, 8, device="cuda", requires_grad=True)
    bias = torch.randn(40, device="cuda", requires_grad=True)
    y = ops.masked_softmax(s, None, bias, 0.5)
    (y * torch.arange(40.0, device="cuda").view(5, 8)).sum().backward()
    ref_b = bias.detach().view(5, 8).clone().requires_grad_(True)
    ref_s = s.detach().clone().requires_grad_(True)
    (torch.softmax(0.5 * ref_s + ref_b, -1) * torch.arange(40.0, device="cuda").view(5, 8)).sum().backward()
    assert bias.grad.shape == (40,), bias.grad.shape
    close("the flattened bias's gradient", bias.grad.view(5, 8), ref_b.grad, 1e-5, 1e-4)
    close("x's gradient beside it", s.grad, ref_s.grad, 1e-5, 1e-4)
    xp = torch.randn(5, 8, device="cuda", requires_grad=True)
    probs = torch.rand(5, 1, device="cuda", requires_grad=True)
    m = torch.tensor([4, 0, 2], device="cuda", dtype=torch.int32)
    out, pout = ops.permute_rows(xp, m, probs)
    (pout * torch.tensor([1.0, 2.0, 3.0], device="cuda")).sum().backward()
    assert probs.grad.shape == (5, 1) and probs.grad.flatten().tolist() == [2.0, 0.0, 3.0, 0.0, 1.0], probs.grad
    cpu = torch.randn(4, D)
    for f, name in ((lambda: ops.rms_norm(cpu), "layernorm_fwd"),
                    (lambda: ops.layer_norm(cpu.clone().requires_grad_(True)), "layernorm_fwd"),
                    (lambda: ops.masked_softmax(cpu), "masked_softmax"),
                    (lambda: ops.permute_rows(cpu, torch.arange(4)), "permute_rows")):
        try:
            f()
        except ktune.KtuneError as e:
            want = "ktune.ops: %s's tensors are on cpu; ktune's kernels take CUDA tensors" % name
            assert str(e) == want and e.status == "KT_ERR_ARGS", (str(e), want)
        else:
            raise AssertionError("no error for tensors on cpu: " + name)


@test
def a_second_order_gradient_is_refused_not_dropped():
    """Under create_graph=True the norms' gradients are right and marked:
    a second backward through them (a gradient penalty) raises, where it
    silently treated the norm's gradient as a constant; grads taken with
    create_graph=True and not differentiated again are fine. (With
    ktune.torch_norms installed, torch's own nodes and their double
    backward take these calls: not this test's.)"""
    from ktune import torch_norms
    assert not torch_norms.installed(), "an earlier test left ktune.torch_norms installed"
    torch.manual_seed(9)
    x = torch.randn(6, 256, device="cuda", requires_grad=True)
    w = (torch.rand(256, device="cuda") + 0.5).requires_grad_(True)
    lin = torch.randn(256, 256, device="cuda", requires_grad=True)
    for norm in (lambda t: ops.layer_norm(t, w), lambda t: ops.rms_norm(t, w)):
        plain = torch.autograd.grad(norm(x @ lin).square().sum(), x)[0]
        g = torch.autograd.grad(norm(x @ lin).square().sum(), x, create_graph=True)[0]
        close("the first-order gradient under create_graph", g.detach(), plain, 1e-5, 1e-5)
        try:
            (g.norm() - 1).square().backward()
        except RuntimeError as e:
            assert "differentiate twice" in str(e), str(e)
        else:
            raise AssertionError("a second backward through the norm ran")


@test
def meta_and_fake_tensors_get_shapes_and_launch_nothing():
    """Tensors without data (the meta device; FakeTensorMode, as memory
    estimators and shape checkers use it outside torch.compile) go through
    the operators' fake implementations: outputs and gradients of the
    right shapes, nothing launched (the paths that skip torch's dispatcher
    read data pointers such tensors do not have)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    rt = ktune.runtime(0)
    n = rt.stats()["launches"]
    for dev, mode in (("meta", None), ("cuda", FakeTensorMode())):
        with mode if mode is not None else contextlib.nullcontext():
            x = torch.empty(4, 3, 64, device=dev)
            w, r = torch.empty(64, device=dev), torch.empty(12, 64, device=dev)
            m = torch.arange(4, device=dev, dtype=torch.int32)
            assert ops.rms_norm(x, w).shape == (4, 3, 64)
            y, h = ops.layer_norm(x, w, w, residual=r, return_residual=True)
            assert y.shape == h.shape == (4, 3, 64)
            assert ops.masked_softmax(x, x > 0, None, 0.5).shape == (4, 3, 64)
            out, p = ops.permute_rows(x[:, 0], m, torch.empty(4, device=dev))
            assert out.shape == (4, 64) and p.shape == (4,)
            assert ops.unpermute_rows(x[:, 0], m, 6)[0].shape == (6, 64)
            xg, wg, rg = (t.clone().requires_grad_(True) for t in (x, w, r))
            y, h = ops.layer_norm(xg, wg, None, residual=rg, return_residual=True)
            (y.sum() + h.sum()).backward()
            assert (xg.grad.shape, wg.grad.shape, rg.grad.shape) == ((4, 3, 64), (64,), (12, 64)), dev
    assert rt.stats()["launches"] == n, rt.stats()["launches"] - n


def _poison():
    """Frees a block of NaNs for the caching allocator to hand out next:
    outputs that a kernel leaves unwritten then show."""
    torch.full((1 << 24,), float("nan"), device="cuda")


def _aten_case(shape, k, dtype, wdtype, rms, wb):
    """x and its weight / bias over the last k dims, float64 copies, and the
    reference forward and backward (float64 autograd)."""
    ns = shape[len(shape) - k:]
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    w = torch.rand(*ns, device="cuda", dtype=wdtype) + 0.5 if "w" in wb else None
    b = torch.randn(*ns, device="cuda", dtype=wdtype) if "b" in wb else None
    return x, w, b, ns


def _aten_run(x, w, b, ns, rms, eps, dy):
    """torch's functional norm, forward and backward: (y, dx, dw, db)."""
    xs, ws, bs = (t.detach().requires_grad_(True) if t is not None else None for t in (x, w, b))
    y = F.rms_norm(xs, ns, ws, eps) if rms else F.layer_norm(xs, ns, ws, bs, eps)
    y.backward(dy)
    return y.detach(), xs.grad, ws.grad if ws is not None else None, bs.grad if bs is not None else None


def _aten_ref(x, w, b, ns, rms, eps, dy):
    """float64 reference over flattened rows: (y, dx, dw, db)."""
    D = 1
    for n in ns:
        D *= n
    xs, ws, bs = (t.detach().double().reshape(-1, D).requires_grad_(True) if t is not None else None
                  for t in (x, w, b))
    ws1, bs1 = (t.reshape(D) if t is not None else None for t in (ws, bs))
    e = (torch.finfo(torch.float32).eps if eps is None else eps)
    y = ref_norm(xs, ws1, bs1, e, rms)
    y.backward(dy.double().reshape(-1, D))
    g = [t.grad.reshape(s.shape) if t is not None else None for t, s in ((xs, x), (ws, w), (bs, b))]
    return y.detach().reshape(x.shape), g[0], g[1], g[2]


def _launches():
    return ktune.runtime(0).stats()["launches"]


@test
def torch_norms_run_ktunes_kernels_under_torchs_autograd():
    """ktune.torch_norms.install(): F.rms_norm and F.layer_norm on CUDA, with
    torch's own autograd nodes, run ktune's kernels (the runtime counts the
    launches) and match float64 forward and backward over ragged rows, long
    rows, several normalized dims, weights and biases in each dtype; outputs
    have torch's shapes and dtypes, and the saved statistics torch's layout.
    uninstall() gives torch's kernels back."""
    from ktune import torch_norms
    torch.manual_seed(5)
    bf, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    cases = [((1, 4096), 1, bf, bf, True, "w"), ((3, 1000), 1, f16, f16, False, "wb"), ((131, 768), 1, f32, f32, True, ""),
             ((1000, 4096), 1, bf, bf, False, "wb"), ((300, 12288), 1, bf, bf, True, "w"), ((2, 7, 320), 1, f16, f16, False, "w"),
             ((5, 8, 96), 2, bf, bf, False, "wb"), ((64, 16384), 1, f16, f16, False, ""), ((2048, 2048), 1, f32, f32, False, "b")]
    natives = []
    for c in cases:  # torch's own results first, for the shapes and dtypes
        x, w, b, ns = _aten_case(*c[:4], c[4], c[5])
        dy = torch.randn_like(x)
        natives.append((x, w, b, ns, dy, _aten_run(x, w, b, ns, c[4], 1e-5, dy)))
    torch_norms.install()
    try:
        torch_norms.install()  # again: nothing
        assert torch_norms.installed()
        for c, (x, w, b, ns, dy, nat) in zip(cases, natives):
            tag = "%s k=%d %s/%s rms=%s %s" % (c[0], c[1], c[2], c[3], c[4], c[5])
            _poison()
            n0 = _launches()
            got = _aten_run(x, w, b, ns, c[4], 1e-5, dy)
            torch.cuda.synchronize()
            assert _launches() >= n0 + 2, "%s: ktune's kernels did not run" % tag
            ref = _aten_ref(x, w, b, ns, c[4], 1e-5, dy)
            tol = 1e-4 if c[2] == f32 else 2e-2
            for name, g, n, r in zip(("y", "dx", "dw", "db"), got, nat, ref):
                if r is None:
                    assert g is None and n is None, (tag, name)
                    continue
                assert g.shape == n.shape and g.dtype == n.dtype, (tag, name, g.shape, n.shape, g.dtype, n.dtype)
                close("%s %s" % (tag, name), g, r, tol * (8 if name in ("dw", "db") else 1), tol)
        x = torch.randn(6, 2, 512, device="cuda", dtype=bf)
        w, b = torch.rand(512, device="cuda", dtype=bf), torch.randn(512, device="cuda", dtype=bf)
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [512], w, b, 1e-5)
        torch_norms.uninstall()
        y2, mean2, rstd2 = torch.ops.aten.native_layer_norm(x, [512], w, b, 1e-5)
        for name, a, n in (("y", y, y2), ("mean", mean, mean2), ("rstd", rstd, rstd2)):
            assert a.shape == n.shape and a.dtype == n.dtype and a.is_contiguous(), (name, a.shape, n.shape)
            close("stats " + name, a, n, 2e-2 if name == "y" else 1e-4, 1e-3)
        assert not torch_norms.installed()
        n0 = _launches()
        F.layer_norm(x, (512,), w, b)
        torch.cuda.synchronize()
        assert _launches() == n0, "uninstall() left ktune's kernels in place"
    finally:
        torch_norms.uninstall()


@test
def torch_norms_copy_strided_tensors_for_the_kernels():
    """Strided tensors under ktune.torch_norms (a transposed input, rows
    strided within, a permuted 3-d input, the expanded gradient of
    y.sum(), a transposed gradient) are copied contiguous and run by
    ktune's kernels (the runtime counts the launches), matching float64
    forward and backward; the outputs have x's shape."""
    from ktune import torch_norms
    torch.manual_seed(7)
    bf, f16 = torch.bfloat16, torch.float16
    cases = [(torch.randn(512, 40, device="cuda", dtype=bf).t(), "w", True, "sum"),
             (torch.randn(40, 1024, device="cuda", dtype=bf)[:, ::2], "wb", False, "t"),
             (torch.randn(4, 6, 256, device="cuda", dtype=f16).permute(1, 0, 2), "", False, "sum"),
             (torch.randn(300, 130, device="cuda", dtype=f16).t()[:, :200], "w", True, "t")]
    torch_norms.install()
    try:
        for x, wb, rms, grad in cases:
            D = x.shape[-1]
            tag = "%s %s rms=%s %s %s" % (tuple(x.shape), x.dtype, rms, wb, grad)
            assert not x.is_contiguous(), tag
            w = torch.rand(D, device="cuda", dtype=x.dtype) + 0.5 if "w" in wb else None
            b = torch.randn(D, device="cuda", dtype=x.dtype) if "b" in wb else None
            xs, ws, bs = (t.detach().requires_grad_(True) if t is not None else None for t in (x, w, b))
            _poison()
            n0 = _launches()
            y = F.rms_norm(xs, (D,), ws, 1e-5) if rms else F.layer_norm(xs, (D,), ws, bs, 1e-5)
            if grad == "sum":
                y.sum().backward()  # dy: ones expanded, stride 0
                dy = torch.ones_like(x)
            else:
                dy = torch.randn(*reversed(x.shape), device="cuda", dtype=x.dtype).transpose(0, -1)
                y.backward(dy)
            torch.cuda.synchronize()
            assert _launches() >= n0 + 2, "%s: ktune's kernels did not run (%d launches)" % (tag, _launches() - n0)
            ref = _aten_ref(x, w, b, (D,), rms, 1e-5, dy)
            for name, g, r in zip(("y", "dx", "dw", "db"), (y.detach(), xs.grad, ws.grad if ws is not None else None,
                                                           bs.grad if bs is not None else None), ref):
                if r is None:
                    assert g is None, (tag, name)
                    continue
                assert g.shape == r.shape and g.dtype == x.dtype, (tag, name, g.shape, r.shape, g.dtype)
                close("%s %s" % (tag, name), g, r, 2e-2 * (8 if name in ("dw", "db") else 1), 2e-2)
    finally:
        torch_norms.uninstall()


@test
def torch_norms_fallback_and_errors():
    """What ktune's kernels do not take is computed from torch's elementwise
    operators: float64 (strided too), a mixed RMSNorm weight, RMSNorm's
    default eps; the backward's output mask leaves outputs undefined; a
    shape torch would refuse raises naming the operator; ops.rms_norm under
    autograd goes through torch's node; a captured graph replays the
    forward and backward as eager calls run them."""
    from ktune import torch_norms
    aten = torch.ops.aten
    torch.manual_seed(6)
    x64 = torch.randn(33, 200, device="cuda", dtype=torch.float64)
    w64 = torch.rand(200, device="cuda", dtype=torch.float64) + 0.5
    xm = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    wm = torch.rand(256, device="cuda") + 0.5
    cases = [(x64, w64, None, True, 1e-6), (x64, w64, w64 - 1, False, 1e-5), (x64.t(), w64[:33], None, True, 1e-6),
             (xm, None, None, True, None)]  # the third: strided float64
    natives = []
    for x, w, b, rms, eps in cases:
        dy = torch.randn_like(x)
        natives.append((dy, _aten_run(x, w, b, (x.shape[-1],), rms, eps, dy)))
    torch_norms.install()
    try:
        for (x, w, b, rms, eps), (dy, nat) in zip(cases, natives):
            tag = "%s %s %s rms=%s eps=%s" % (tuple(x.shape), x.dtype, w.dtype if w is not None else None, rms, eps)
            got = _aten_run(x, w, b, (x.shape[-1],), rms, eps, dy)
            tol = 1e-9 if x.dtype == torch.float64 else 2e-2
            for name, g, n in zip(("y", "dx", "dw", "db"), got, nat):
                if n is None:
                    assert g is None, (tag, name)
                    continue
                assert g.shape == n.shape and g.dtype == n.dtype, (tag, name, g.dtype, n.dtype)
                close("%s %s" % (tag, name), g, n, tol * (8 if name in ("dw", "db") else 1), tol)
        x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
        w, b = torch.rand(1024, device="cuda", dtype=torch.bfloat16), torch.randn(1024, device="cuda", dtype=torch.bfloat16)
        y, mean, rstd = aten.native_layer_norm(x, [1024], w, b, 1e-5)
        dy = torch.randn_like(x)
        for mask in ([True, False, True], [False, True, False], [False, False, False]):
            outs = aten.native_layer_norm_backward(dy, x, [1024], mean, rstd, w, b, mask)
            for m, o in zip(mask, outs):
                assert (o is not None) == m, (mask, [o is not None for o in outs])
        y, rstd = aten._fused_rms_norm(x, [1024], w, None)
        outs = aten._fused_rms_norm_backward(dy, x, [1024], rstd, w, [True, False])
        assert outs[0] is not None and outs[1] is None
        ym, rm = aten._fused_rms_norm(xm, [256], wm, 1e-6)  # a float32 weight: the fallback
        assert ym.dtype == torch.bfloat16 and rm.dtype == torch.float32 and rm.shape == (16, 1)
        close("mixed RMSNorm", ym, ref_norm(xm.double(), wm.double(), None, 1e-6, True), 2e-2, 2e-2)
        for fn, want in ((lambda: F.layer_norm(x, (1000,), None, None), "ktune (aten::native_layer_norm): "
                          "native_layer_norm: normalized_shape [1000] does not end input's shape [8, 1024]"),
                         (lambda: F.layer_norm(xm, (256,), wm, None), "ktune (aten::native_layer_norm): "
                          "native_layer_norm: weight is torch.float32 and input torch.bfloat16; torch takes one "
                          "dtype"),
                         (lambda: aten._fused_rms_norm(x, [1024], w[:512], None), "ktune (aten::_fused_rms_norm): "
                          "_fused_rms_norm: weight has shape [512]; normalized_shape is [1024]")):
            try:
                fn()
            except RuntimeError as e:
                assert want in str(e), (str(e), want)
            else:
                raise AssertionError("no error: " + want)
        xg = x.float().requires_grad_(True)
        wg = w.float().requires_grad_(True)
        y = ops.rms_norm(xg, wg, 1e-6)
        assert y.grad_fn.name() == "FusedRmsNormBackward0", y.grad_fn.name()
        y.backward(dy.float())
        ref = _aten_ref(x.float(), w.float(), None, (1024,), True, 1e-6, dy.float())
        close("ops.rms_norm dx", xg.grad, ref[1], 1e-4, 1e-4)
        close("ops.rms_norm dw", wg.grad, ref[2], 1e-3, 1e-4)
        xs = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
        ws = torch.rand(2048, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
        dys = torch.randn(64, 2048, device="cuda", dtype=torch.bfloat16)

        def step(a, b):
            y = F.layer_norm(a, (2048,), b, None)
            return (y,) + torch.autograd.grad(y, (a, b), dys)

        step(xs, ws)
        ktune.wait_tuning()  # the capture then takes the winners that the eager call below takes
        want = [t.detach() for t in step(xs, ws)]
        # Leaves of their own, first used on the capture's stream (autograd's
        # nodes for a leaf keep the stream they were made on).
        xc, wc = (t.detach().clone().requires_grad_(True) for t in (xs, ws))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(xc, wc)  # the warm-up
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            got = [t.detach() for t in step(xc, wc)]
        for t in got:
            t.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        for name, a, b in zip(("y", "dx", "dw"), got, want):
            assert torch.equal(a, b), "the captured layer norm's %s differs from the eager one" % name
    finally:
        torch_norms.uninstall()


@test
def exit_while_tuning():
    """A process that exits while its background tunings compile and time,
    on every visible device, exits with status 0: ktune stops them when the
    interpreter exits. (On two GPUs the exit crashed before.)"""
    code = ("import sys, torch\n"
            "sys.path.insert(0, %r)\n"
            "from ktune import ops\n"
            "for d in range(torch.cuda.device_count()):\n"
            "    with torch.cuda.device(d):\n"
            "        x = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
            "        w = torch.rand(4096, device='cuda', dtype=torch.bfloat16)\n"
            "        ops.layer_norm(x, w, None, 1e-5)\n"
            "        ops.rms_norm(x[:3000, :1000].contiguous(), w[:1000], 1e-5)\n"
            "torch.cuda.synchronize()\n"
            "print('launched')\n") % os.path.dirname(ktune.__path__[0])
    d = tempfile.mkdtemp()
    try:
        env = dict(os.environ, KTUNE_CACHE=os.path.join(d, "exit.db"))
        env.pop("KTUNE_MODE", None)  # async, the package's default
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
            assert (r.returncode, r.stdout) == (0, "launched\n"), (r.returncode, r.stdout, r.stderr[-2000:])
    finally:
        shutil.rmtree(d)


@test
def two_devices():
    n = torch.cuda.device_count()
    if n < 2:
        raise Skip("one CUDA device here; the two-device test needs two")
    outs = []
    for d in (0, 1):
        with torch.cuda.device(d):
            x = torch.randn(50, 512, device="cuda:%d" % d)
            w = torch.rand(512, device="cuda:%d" % d)
            outs.append((ops.rms_norm(x, w), x, w))
    for y, x, w in outs:
        torch.cuda.synchronize(y.device)
        close("device %s" % y.device, y, ref_norm(x.double(), w.double(), None, 1e-6, True), 1e-4, 1e-4)


def selected(arg):
    """The tests arg names: those whose name holds it, or with --part=K/N
    the K-th of N interleaved shares (1-based), which make gpu-test runs
    side by side; every test where arg is None. Exits naming a bad --part."""
    if not arg or not arg.startswith("--part="):
        return [fn for fn in TESTS if not arg or arg in fn.__name__]
    k, _, n = arg[len("--part="):].partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        sys.exit("test_ops.py: %s: give --part=K/N with 1 <= K <= N" % arg)
    return TESTS[int(k) - 1::int(n)]


def main():
    flt = sys.argv[1] if len(sys.argv) > 1 else None
    tests = selected(flt)
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: %d skipped" % len(tests))
        print("0 passed, 0 failed, %d skipped" % len(tests))
        return 0
    if flt == "--compare-c-and-python-bodies":
        ops.rms_norm(torch.randn(2, 64, device="cuda"))
        compare_c_and_python_bodies()
        return 0
    for fn in tests:
        print("  python: %s" % fn.__name__, flush=True)
        t0 = time.monotonic()
        try:
            fn()
            results["passed"] += 1
        except Skip as e:
            print("    skipped: %s" % e)
            results["skipped"] += 1
        except Exception:
            print("    " + traceback.format_exc().replace("\n", "\n    "))
            results["failed"] += 1
        print("    %.1f s" % (time.monotonic() - t0), flush=True)
    print("%d passed, %d failed, %d skipped" % (results["passed"], results["failed"], results["skipped"]))
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
