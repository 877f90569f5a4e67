"""What the Python tests share: checks that are counted instead of stopping at the first, and
the exit code that ctest reads. The tests import it from their own folder."""

failures = []


def check(ok, what):
    """Record a failed check (and print it) without stopping the test."""
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def finish(name):
    """The exit code: 1 when a check failed, after saying how many."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"{name}: all checks passed")
    return 0
