"""What the Python tests share: checks that are counted instead of stopping at the first, and
the exit code that ctest reads; for the scripts that stop at the first mismatch, the exception,
a runner of the dctchop command and a PSNR. The tests import it from their own folder."""
import math
import subprocess

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


class Mismatch(Exception):
    """A check that stops the script: dctchop's output differs from what was expected."""


def run(binary, args, cwd=None):
    """Run dctchop; return (stdout, stderr); raise Mismatch on a non-zero exit."""
    r = subprocess.run([binary] + list(args), cwd=cwd, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise Mismatch(f"`dctchop {' '.join(args)}` exited {r.returncode}\n"
                       f"stdout: {r.stdout.strip()}\nstderr: {r.stderr.strip()}")
    return r.stdout, r.stderr


def psnr(original, decoded, peak):
    """PSNR of two NumPy arrays in dB, over every value; inf when they are equal."""
    mse = float(((original.astype("float64") - decoded.astype("float64")) ** 2).mean())
    return float("inf") if mse == 0 else 10.0 * math.log10(peak * peak / mse)
