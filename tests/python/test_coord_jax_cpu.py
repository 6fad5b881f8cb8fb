"""ktune.distributed.enable_jax without a GPU (make test runs it through
tests/t_jax.c where jax imports): three processes joined by
jax.distributed (JAX on the CPU), each a runtime without a device over the
Coordinator enable_jax makes on JAX's key-value client. Every key is
published once, under its own name in JAX's store, and followed by the
other processes, which settle the same configs; a second runtime of a
process (a second GPU) follows every key, its own process's too; a name
published again is a success with the same bytes, a failure with others
(JAX's store takes a name once); a name never published is a timeout, not
a failed exchange; enable_jax before jax.distributed.initialize is refused
by name. Ends with "N passed, N failed, N skipped"."""
import ctypes
import json
import os
import sys
import tempfile
import time

from procs import free_port, run_all

R = 3
KEYS = [64 * (i + 1) for i in range(8)]


def rank_main(r, port, out):
    """One process of the job: its results in out/<r>.json."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from jax._src import distributed as jd

    import ktune
    import ktune.distributed as kd
    from ranks_cpu import L, config_for, open_rank, stats
    res = {}
    if r == 0:
        try:
            kd.enable_jax()
            res["early"] = "accepted"
        except ktune.KtuneError as e:
            res["early"] = [e.status, str(e)]
    jax.distributed.initialize(coordinator_address="127.0.0.1:%d" % port, num_processes=R, process_id=r)
    c = kd.enable_jax(timeout=60)
    h, k = open_rank(c, os.path.join(out, "%d.db" % r))
    res["configs"] = [config_for(k, d).decode() for d in KEYS]
    s = stats(h)
    res["stats"] = [s.published, s.followed, s.coord_failed]
    if r == 0:
        # A second runtime of this process, as for a second GPU: it follows
        # every key, the ones this process owns too.
        h2, k2 = open_rank(c, os.path.join(out, "second.db"))
        res["second"] = [config_for(k2, d).decode() for d in KEYS]
        s = stats(h2)
        res["second_stats"] = [s.published, s.followed, s.coord_failed]
        L.kt_runtime_close(h2)
        one, other = ctypes.create_string_buffer(b"same", 4), ctypes.create_string_buffer(b"diff", 4)
        res["twice"] = [c._cbs[0](None, b"ktune-test/twice", one, 4), c._cbs[0](None, b"ktune-test/twice", one, 4),
                        c._cbs[0](None, b"ktune-test/twice", other, 4)]
    L.kt_runtime_close(h)
    n, buf = ctypes.c_size_t(), ctypes.create_string_buffer(8)
    t0 = time.monotonic()
    res["absent"] = [c._cbs[1](None, b"ktune-test/absent", buf, 8, ctypes.byref(n), 200), time.monotonic() - t0]
    client = jd.global_state.client
    client.key_value_set("ktune-test/done/%d" % r, "1")
    for q in range(R):  # every rank's keys published before rank 0 lists them
        client.blocking_key_value_get("ktune-test/done/%d" % q, 60000)
    if r == 0:
        res["names"] = [name for name, _ in client.key_value_dir_get_bytes("ktune/")]
    with open(os.path.join(out, "%d.json" % r), "w") as f:
        json.dump(res, f)
    client.key_value_set("ktune-test/read/%d" % r, "1")
    for q in range(R):  # rank 0 has read the store before any rank leaves
        client.blocking_key_value_get("ktune-test/read/%d" % q, 60000)
    jax.distributed.shutdown()


def run_job(tmp):
    """The R processes to their end; their results by rank."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    port = free_port()
    argvs = [[sys.executable, os.path.abspath(__file__), "rank", str(r), str(port), tmp] for r in range(R)]
    for r, (rc, log) in enumerate(run_all(argvs, [env] * R, 180)):
        assert rc == 0, "rank %d exited %s:\n%s" % (r, rc, log[-3000:])
    return [json.load(open(os.path.join(tmp, "%d.json" % r))) for r in range(R)]


if len(sys.argv) > 1 and sys.argv[1] == "rank":
    rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    sys.exit(0)

try:
    import jax  # noqa: F401
except ImportError:
    print("  skipped: jax does not import here")
    print("0 passed, 0 failed, 5 skipped")
    sys.exit(0)
from checks import check, summary  # noqa: E402

tmp = tempfile.TemporaryDirectory()
job = {}


def three_processes_agree():
    job["res"] = res = run_job(tmp.name)
    assert res[0]["configs"] == res[1]["configs"] == res[2]["configs"], [r["configs"] for r in res]
    pub, fol, failed = (sum(r["stats"][i] for r in res) for i in range(3))
    assert (pub, fol, failed) == (len(KEYS), len(KEYS) * (R - 1), 0), [r["stats"] for r in res]
    # The keys spread over the owners, each published once under its name.
    assert sum(1 for r in res if r["stats"][0]) >= 2, [r["stats"] for r in res]
    names = res[0]["names"]
    assert len(names) == len(KEYS) and all(n.startswith("ktune/rmsnorm_small/") for n in names), names


def absent_is_a_timeout():
    for r in job["res"]:
        rc, took = r["absent"]
        assert rc == 1 and 0.15 < took < 10, r["absent"]


def a_second_runtime_follows():
    r0 = job["res"][0]
    assert r0["second"] == r0["configs"], (r0["second"], r0["configs"])
    assert r0["second_stats"] == [0, len(KEYS), 0], r0["second_stats"]


def a_name_twice():
    assert job["res"][0]["twice"] == [0, 0, -1], job["res"][0]["twice"]


def early_enable_is_refused():
    assert job["res"][0]["early"] == ["KT_ERR_INVALID", "ktune.distributed.enable_jax: call "
                                      "jax.distributed.initialize() first"], job["res"][0]["early"]


check("three JAX processes agree through jax.distributed's key-value client", three_processes_agree)
if "res" in job:
    check("a name never published is a timeout (1), not a failed exchange", absent_is_a_timeout)
    check("a second runtime of a process follows every key, its own process's too", a_second_runtime_follows)
    check("a name published again: the same bytes are a success, others a failure", a_name_twice)
    check("enable_jax before jax.distributed.initialize is refused by name", early_enable_is_refused)
tmp.cleanup()
sys.exit(summary(0 if "res" in job else 4))
