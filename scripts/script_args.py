"""What the Python scripts share: argparse types for their numbers, and running main() so
that an interruption (Ctrl-C, SIGTERM from timeout or kill) exits as one line with 130 or 143,
after the `finally`/`except` blocks that remove partial files have run."""
import argparse
import contextlib
import math
import os
import signal
import sys


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return v


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return v


@contextlib.contextmanager
def written_atomically(path):
    """Gives path + '.tmp' to write; renamed to path when the block ends, removed if it
    raises (an interruption included)."""
    tmp = path + ".tmp"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def run_main(main, name):
    """sys.exit(main()), SIGTERM raised as SystemExit(143) and Ctrl-C as exit 130."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{name}: interrupted; partial files are removed", file=sys.stderr)
        sys.exit(130)
