"""ktune.distributed's Coordinator without a GPU or torch (make test runs
it through tests/t_coord.c): three threads as ranks, each a runtime without
a device over a dict as the job's store, the callbacks made by the Python
package. Every key is published once and followed by the other ranks; a
message larger than the runtime's first buffer comes whole on the second
fetch; an exception in the store is a failed exchange, not a crash, and a
Ctrl-C there is raised again once the call returns. And ktune.Runtime's
options: a budget reaches kt_runtime_open, whose refusal is raised in the
runtime's words; an unknown mode or log level is named with the values it
may take; a device past C's int and a path holding a NUL are refused
before C would cut them; close() from a store's callback is refused. python -m ktune.prewarm's ranks on the GPUs
there are. enable()'s publish keeps a name's first message, and an owner
whose publish is refused follows that message. Ends with "N passed, N failed, N skipped"."""
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time

import ktune
from checks import check, summary
from ktune.distributed import Coordinator
from ranks_cpu import L, config_for, open_rank, stats


class Store:
    """What torch.distributed's store does, for threads."""

    def __init__(self):
        self.d, self.cv = {}, threading.Condition()

    def set(self, name, data):
        with self.cv:
            self.d[name] = bytes(data)
            self.cv.notify_all()

    def fetch(self, name, timeout_s):
        end = time.monotonic() + timeout_s
        with self.cv:
            while name not in self.d:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)
            return self.d[name]


def three_ranks():
    with tempfile.TemporaryDirectory() as tmp:
        three_ranks_in(tmp)


def three_ranks_in(tmp):
    store, R, keys = Store(), 3, [64 * (i + 1) for i in range(8)]
    coords = [Coordinator(r, R, store.set, store.fetch, timeout=30) for r in range(R)]
    rts = [open_rank(coords[r], os.path.join(tmp, "%d.db" % r)) for r in range(R)]
    got = [[None] * len(keys) for _ in range(R)]

    def run(r):
        h, k = rts[r]
        for i, d in enumerate(keys):
            got[r][i] = config_for(k, d)
    ths = [threading.Thread(target=run, args=(r,)) for r in range(R)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    st = [stats(h) for h, _ in rts]
    for h, _ in rts:
        L.kt_runtime_close(h)
    assert got[0] == got[1] == got[2] and None not in got[0], got
    assert sum(s.published for s in st) == len(keys), [s.published for s in st]
    assert sum(s.followed for s in st) == len(keys) * (R - 1)
    assert sum(s.coord_failed for s in st) == 0
    assert len(store.d) == len(keys) and all(n.startswith("ktune/rmsnorm_small/") for n in store.d)


def big_message_two_fetches():
    """A message longer than the buffer given: the length first, the bytes
    on the next call (the runtime then asks with a buffer that fits)."""
    store = Store()
    store.set("m", b"x" * 1000)
    c = Coordinator(0, 2, store.set, store.fetch)
    fetch = c._cbs[1]
    n = ctypes.c_size_t()
    small = ctypes.create_string_buffer(10)
    assert fetch(None, b"m", small, 10, ctypes.byref(n), 0) == 0 and n.value == 1000
    big = ctypes.create_string_buffer(1000)
    assert fetch(None, b"m", big, 1000, ctypes.byref(n), 0) == 0 and big.raw == b"x" * 1000
    assert fetch(None, b"absent", big, 1000, ctypes.byref(n), 0) == 1


def store_errors_are_failures():
    def broken(*a):
        raise RuntimeError("store down")
    c = Coordinator(0, 2, broken, broken)
    n = ctypes.c_size_t()
    buf = ctypes.create_string_buffer(8)
    assert c._cbs[0](None, b"m", buf, 8) == -1
    assert c._cbs[1](None, b"m", buf, 8, ctypes.byref(n), 0) == -1
    try:
        Coordinator(2, 2, broken, broken)
        raise AssertionError("rank 2 of 2 accepted")
    except ktune.KtuneError as e:
        assert str(e) == "ktune.distributed: rank 2 is not in [0, 2)", str(e)


def ctrl_c_in_a_callback_fails_the_exchange_and_is_raised_again():
    """A Ctrl-C in the store (KeyboardInterrupt in a callback C called) is a
    failed exchange, not a publish done or an empty message; the interrupt
    is raised again in the main thread once the ktune call has returned,
    never inside the next callback of the same call (an owner whose publish
    fails fetches next: ctypes would print the interrupt as unraisable and
    return garbage)."""
    def interrupted(*a):
        raise KeyboardInterrupt
    # As in a program run from a terminal: a shell starts a background job
    # (make test &) with SIGINT ignored, and Python then handles no SIGINT,
    # so no interrupt reaches it, resent or pressed.
    was = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctrl_c_in_callbacks(interrupted)
    finally:
        signal.signal(signal.SIGINT, was)


def ctrl_c_in_callbacks(interrupted):
    unraisable, hook = [], sys.unraisablehook
    c = Coordinator(0, 2, interrupted, interrupted, timeout=5)
    with tempfile.TemporaryDirectory() as tmp:
        h, k = open_rank(c, os.path.join(tmp, "0.db"))
        raised = 0
        sys.unraisablehook = unraisable.append
        try:
            for d in (64, 128, 192, 256):  # keys of both ranks
                try:
                    config_for(k, d)
                    for _ in range(1000):  # calls, where the interrupt lands
                        abs(1)
                except KeyboardInterrupt:
                    raised += 1
        finally:
            sys.unraisablehook = hook
        s = stats(h)
        L.kt_runtime_close(h)
    assert raised == 4 and not unraisable, (raised, [u.exc_type for u in unraisable])
    assert (s.published, s.followed, s.coord_failed) == (0, 0, 4), (s.published, s.followed, s.coord_failed)


def closing_from_a_store_callback_is_refused():
    """ktune.Runtime.close() from a store's callback (C's call still uses
    the runtime) raises KtuneError and leaves the runtime open; closed once
    the call returned, it is closed."""
    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        rt = ktune.Runtime.__new__(ktune.Runtime)

        def attempt(*a):
            try:
                rt.close()
                seen.append("closed")
            except ktune.KtuneError as e:
                seen.append((e.status, str(e)))

        # Whichever rank owns the key, this one publishes or fetches.
        c = Coordinator(0, 2, lambda name, data: attempt() or True, lambda name, timeout_s: attempt(), 0.05)
        h, k = open_rank(c, os.path.join(tmp, "c.db"))
        rt._h = h
        config_for(k, 64)
        refused = ("KT_ERR_INVALID", "kt_runtime_close: called from a callback of one of the runtime's calls, which is "
                                     "still running: call it once that call has returned")
        assert seen and all(s == refused for s in seen), seen
        assert rt._h is h
        rt.close()
        assert rt._h is None


def refused_runtime_options_are_named():
    for kw, text in ((dict(budget_s=-1), "kt_runtime_open: budget_s -1 is not a number of seconds >= 0"),
                     (dict(budget_s=float("nan")), "kt_runtime_open: budget_s nan is not a number of seconds >= 0"),
                     (dict(mode="fast"), "ktune.Runtime: mode 'fast' is not one of default, tune, cache-only, off, "
                                         "async"),
                     (dict(log_level="loud"), "ktune.Runtime: log_level 'loud' is not one of error, warn, info, "
                                              "debug"),
                     (dict(device=-1), "ktune.Runtime: device -1 is not a GPU index"),
                     (dict(device=2 ** 32), "ktune.Runtime: device 4294967296 is not a GPU index"),
                     (dict(device="0"), "ktune.Runtime: device must be an int, not str"),
                     (dict(cache_path="/tmp/a\0b.db"), "ktune.Runtime: cache_path '/tmp/a\\x00b.db' holds a NUL byte"),
                     (dict(cache_path=7), "ktune.Runtime: cache_path must be a str, bytes or a path, not int")):
        try:
            ktune.Runtime(**kw)
            raise AssertionError("%r accepted" % kw)
        except ktune.KtuneError as e:
            assert (e.status, str(e)) == ("KT_ERR_INVALID", text), (e.status, str(e))


class TorchLikeStore:
    """What a torch.distributed Store does where torch is not installed:
    compare_set(name, b"", v) sets v only where the name is absent and
    returns the name's value."""

    def __init__(self):
        self.d = {}

    def compare_set(self, name, expected, desired):
        if name not in self.d and expected == b"":
            self.d[name] = bytes(desired)
        return self.d.get(name, bytes(expected))

    def check(self, names):
        return all(n in self.d for n in names)

    def get(self, name):
        return self.d[name]


def enable_keeps_a_names_first_message():
    """enable()'s publish keeps a name's first message (compare_set, where
    set would overwrite it): the same bytes again are done, other bytes
    raise. A runtime whose publish is refused so follows the message there:
    here another runtime of its rank publishes a config between this one's
    look and its publish, and the call returns that config."""
    from ktune.distributed import _store_fetch, _store_publish
    try:
        import torch.distributed as dist
        store = dist.HashStore()
    except ImportError:
        store = TorchLikeStore()
    publish, fetch = _store_publish(store), _store_fetch(store)
    publish("n", b"one")
    publish("n", b"one")
    try:
        publish("n", b"two")
        raise AssertionError("other bytes accepted")
    except ktune.KtuneError as e:
        assert str(e) == "ktune.distributed: n holds another message", str(e)
    assert fetch("n", 0) == b"one" and fetch("absent", 0) is None
    rival = b'{"config":{"BLOCK":128,"ROWS":1,"VEC":8}}\n'
    raced = []

    def late_fetch(name, timeout_s):
        # Nothing under a name before its owner publishes: the owner's look
        # finds nothing, and a key of rank 1 is a timeout at once.
        return fetch(name, timeout_s) if name in raced else None

    def raced_publish(name, data):
        raced.append(name)
        publish(name, rival)
        publish(name, data)
    c = Coordinator(0, 2, raced_publish, late_fetch, timeout=5)
    with tempfile.TemporaryDirectory() as tmp:
        h, k = open_rank(c, os.path.join(tmp, "0.db"))
        d = 0
        while not raced:  # the first key that this rank owns
            d += 64
            before = stats(h)
            got = config_for(k, d)
        assert got == b"BLOCK=128,ROWS=1,VEC=8", got
        assert config_for(k, d) == got
        s = stats(h)
        L.kt_runtime_close(h)
    assert (s.published - before.published, s.followed - before.followed, s.coord_failed - before.coord_failed) == \
        (0, 1, 0), (s.published, s.followed, s.coord_failed)
    assert fetch(raced[0], 0) == rival


def prewarm_ranks_share_the_gpus_there_are():
    """python -m ktune.prewarm's rank tunes on its local rank's GPU, or on
    the local rank modulo the GPUs where there are fewer; on its local rank
    where they cannot be counted (ktune tune then says why)."""
    from ktune import prewarm

    class Lib:
        def __init__(self, n, st=0):
            self.n, self.st = n, st

        def kt_device_count(self, out):
            out._obj.value = self.n
            return self.st
    real = prewarm.lib
    try:
        for n, st, local, want in ((8, 0, 5, 5), (1, 0, 1, 0), (2, 0, 3, 1), (0, 0, 3, 3), (4, 2, 5, 5)):
            prewarm.lib = lambda: Lib(n, st)
            assert prewarm._gpu_of(local) == want, (n, st, local, prewarm._gpu_of(local))
        prewarm.lib = real
        assert prewarm._gpu_of(3) == 3  # no driver here: KT_ERR_NO_DRIVER
    finally:
        prewarm.lib = real


check("three ranks agree through Python callbacks", three_ranks)
check("a message longer than the buffer comes whole on the second fetch", big_message_two_fetches)
check("a store that raises is a failed exchange", store_errors_are_failures)
check("a Ctrl-C in a callback fails the exchange and is raised again after the call",
      ctrl_c_in_a_callback_fails_the_exchange_and_is_raised_again)
check("ktune.Runtime's refused options raise KtuneError naming them (a device past C's int, a NUL in a path)",
      refused_runtime_options_are_named)
check("ktune.Runtime.close() from a store's callback raises KtuneError and leaves the runtime open",
      closing_from_a_store_callback_is_refused)
check("prewarm's ranks share the GPUs there are", prewarm_ranks_share_the_gpus_there_are)
check("enable()'s store keeps a name's first message, and a refused owner follows it",
      enable_keeps_a_names_first_message)
sys.exit(summary())
