"""The seeds and the tally that tools/fuzz_ops.py and tools/fuzz_jax.py
share: each case is built from its seed alone, so a failing line's seed
rebuilds it.

    run = Run(sys.argv[1:3], CASES)
    for seed, kind in run:      # new seeds until SECONDS pass, or the list
        ...
    run.close(refused, failed)  # "by kind: ..." and "N cases, ..." """
import random
import time


class Run:
    """The cases of one run. args: [SECONDS, SEED or s1,s2,...], either
    absent (60 s from the time's seed). cases: (builder, weight) pairs; a
    seed's kind is drawn from a stream of its own (Random(-seed)), so that
    the builder gets Random(seed) whole and a seed rebuilds its case."""

    def __init__(self, args, cases):
        self.seconds = float(args[0]) if args else 60
        given = args[1] if len(args) > 1 else None
        self.seeds = [int(v) for v in given.split(",")] if given and "," in given else None
        self.seed0 = int(given) if given and not self.seeds else int(time.time())
        self.kinds = [f for f, w in cases for _ in range(w)]
        self.ran = {}
        # A list runs those cases alone: the time's seed would be no help.
        print("seeds %s" % ",".join(map(str, self.seeds)) if self.seeds else "seed %d" % self.seed0, flush=True)

    def __iter__(self):
        t0, n = time.monotonic(), 0
        while (n < len(self.seeds)) if self.seeds else time.monotonic() - t0 < self.seconds:
            seed = self.seeds[n] if self.seeds else self.seed0 + n
            n += 1
            kind = random.Random(-seed).choice(self.kinds)
            self.ran[kind.__name__] = self.ran.get(kind.__name__, 0) + 1
            yield seed, kind

    def close(self, refused, failed):
        """The closing lines; the exit status (1 when any case failed)."""
        print("by kind: " + ", ".join("%s %d" % kv for kv in sorted(self.ran.items())))
        print("%d cases, %d refused, %d failed" % (sum(self.ran.values()), refused, failed))
        return 1 if failed else 0
