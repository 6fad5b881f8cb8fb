"""Ranks of a job that agree on tunings, through the job's own distributed
engine (kt_options.coord in ktune.h; docs/embedding.md).

    import torch.distributed as dist, ktune.distributed
    dist.init_process_group("nccl")          # as the job already does
    ktune.distributed.enable()               # before the first ktune call

On a miss, the key's owner (a hash of the key, so a model's keys spread over
the ranks) settles it as it would alone and publishes the config and its
cubin through the process group's key-value store; the other ranks wait for
it (in async mode, the Python ops' default, on the background tuner, so the
keys of different owners tune in parallel) and launch the same config. An
owner silent for `timeout` seconds, or a failed exchange, leaves a rank
with its cached config or the default, and a warning.

enable_jax() does the same over jax.distributed's key-value client.
"""
import ctypes
import time

from . import KtuneError, _capi, _set_coordinator

__all__ = ["enable", "enable_jax", "disable", "Coordinator"]


class Coordinator:
    """The hook over any key-value store: publish(name, data) makes bytes
    visible to every rank, keeping a name's first message (the same bytes
    again are done; other bytes raise, and the runtime then follows the
    message there); fetch(name, timeout_s) returns them, or None when they
    did not come within timeout_s. Exceptions count as failures; a
    KeyboardInterrupt is raised again in the main thread once the ktune call
    has returned."""

    def __init__(self, rank, size, publish, fetch, timeout=300.0):
        if not 0 <= rank < size:
            raise KtuneError("KT_ERR_INVALID", "ktune.distributed: rank %d is not in [0, %d)" % (rank, size))
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        self._publish, self._fetch = publish, fetch
        self._last = {}  # name -> bytes of the last fetch: the runtime may ask twice

        @_capi.callback
        def publish_cb(user, name, data, n):
            try:
                self._publish(name.decode(), ctypes.string_at(data, n))
                return 0
            except BaseException as e:  # noqa: BLE001 -- a failed exchange; Ctrl-C raised again
                _capi.interrupted_in_callback(e)
                return -1

        @_capi.callback
        def fetch_cb(user, name, buf, cap, length, timeout_ms):
            try:
                key = name.decode()
                val = self._last.pop(key, None)
                if val is None:
                    val = self._fetch(key, timeout_ms / 1000.0)
                if val is None:
                    return 1
                length[0] = len(val)
                ctypes.memmove(buf, val, min(len(val), cap))
                if len(val) > cap:
                    self._last[key] = val
                return 0
            except BaseException as e:  # noqa: BLE001 -- as publish_cb
                _capi.interrupted_in_callback(e)
                return -1

        # Kept alive as long as the coordinator: C holds only the pointers.
        self._cbs = (_capi.PUBLISH_FN(publish_cb), _capi.FETCH_FN(fetch_cb))

    def c_struct(self):
        return _capi.Coordinator(rank=self.rank, size=self.size, timeout_s=self.timeout, user=None,
                                 publish=self._cbs[0], fetch=self._cbs[1])


def _store_fetch(store):
    # check() in a loop rather than store.wait(): a wait that times out logs
    # a socket warning in torch, and async mode polls with short waits.
    def fetch(name, timeout_s):
        deadline = time.monotonic() + timeout_s
        pause = 0.002
        while not store.check([name]):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
        return store.get(name)
    return fetch


def _store_publish(store):
    # compare_set, not set: the store keeps a name's first message. Two
    # runtimes of one process (a rank driving several GPUs) may publish one
    # name; set would let ranks that fetched before and after the second
    # run different configs. The runtime follows the message it finds.
    def publish(name, data):
        data = bytes(data)
        if store.compare_set(name, b"", data) != data:
            raise KtuneError("KT_ERR_INVALID", "ktune.distributed: %s holds another message" % name)
    return publish


def enable(group=None, timeout=300.0, store=None):
    """Coordinate this process's runtimes over a torch.distributed process
    group (default: the default group), through its key-value store (or the
    store given: any torch.distributed Store; messages are published with
    compare_set, so a name keeps its first message). The group's collectives are
    never used, so an NCCL training group is fine; call before the first
    ktune call of the process. Returns the Coordinator."""
    import torch.distributed as dist
    if not dist.is_initialized():
        raise KtuneError("KT_ERR_INVALID", "ktune.distributed.enable: torch.distributed is not initialized "
                         "(call dist.init_process_group first)")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if store is None:
        store = dist.distributed_c10d._get_default_store()
    if group is not None:
        ranks = dist.get_process_group_ranks(group)
        store = dist.PrefixStore("ktune-group-%s/" % "-".join(map(str, ranks)), store)
    c = Coordinator(rank, size, _store_publish(store), _store_fetch(store), timeout)
    _set_coordinator(c if size > 1 else None)
    return c


def enable_jax(timeout=300.0):
    """The same over jax.distributed (after jax.distributed.initialize()):
    its key-value client carries the messages, the process index is the
    rank. Uses the client jax keeps in jax._src.distributed, which is not a
    public API of jax."""
    import jax
    from jax._src import distributed as jd
    client = jd.global_state.client
    if client is None:
        raise KtuneError("KT_ERR_INVALID", "ktune.distributed.enable_jax: call jax.distributed.initialize() first")

    def fetch(name, timeout_s):
        try:
            # A look that must not wait asks without a deadline: a blocking
            # get of 1 ms can expire on a loaded host before the store
            # answers, and a name that is there would read as absent.
            if timeout_s <= 0:
                return client.key_value_try_get_bytes(name)
            return client.blocking_key_value_get_bytes(name, max(1, int(timeout_s * 1000)))
        except Exception as e:
            text = str(e)
            if "DEADLINE_EXCEEDED" in text or "timed out" in text.lower() or (timeout_s <= 0 and "NOT_FOUND" in text):
                return None
            raise

    def publish(name, data):
        try:
            client.key_value_set_bytes(name, data)
        except Exception as e:
            # JAX's store takes a name once. Another runtime of this
            # process (a GPU of the same model) may have published the same
            # message first: that is a success; a different one is not.
            if "ALREADY_EXISTS" not in str(e) or fetch(name, 1.0) != bytes(data):
                raise

    c = Coordinator(jax.process_index(), jax.process_count(), publish, fetch, timeout)
    _set_coordinator(c if c.size > 1 else None)
    return c


def disable():
    """Runtimes opened from now on tune alone."""
    _set_coordinator(None)


