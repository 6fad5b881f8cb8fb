"""The tally of a Python test script: check() runs one test, summary()
prints the closing line "N passed, N failed, N skipped" and gives the exit
status. Scripts run from the project root find this beside them."""
import time
import traceback

passed = failed = 0


def check(name, fn, limit=3):
    """Run fn; an exception fails the test, with its traceback (limit frames)."""
    global passed, failed
    t0 = time.monotonic()
    try:
        fn()
        passed += 1
        print("  ok: %s (%.1f s)" % (name, time.monotonic() - t0))
    except Exception:  # noqa: BLE001 - any error is the test's failure
        failed += 1
        print("  FAILED: %s (%.1f s)" % (name, time.monotonic() - t0))
        traceback.print_exc(limit=limit)


def summary(skipped=0):
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0
