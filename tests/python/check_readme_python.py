"""The README's Python examples run as written: every ```python block, in order, in one
interpreter, in a scratch folder where sample_data/ is the repository's.

Usage: check_readme_python.py README.md SCRATCH_DIR   (PYTHONPATH holds the built package)"""
import os
import re
import sys
import tempfile

from checks import check, finish


def main():
    readme, scratch = sys.argv[1], sys.argv[2]
    with open(readme, encoding="utf-8") as f:
        blocks = re.findall(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)
    check(len(blocks) >= 2, f"README python blocks: {len(blocks)}")
    os.makedirs(scratch, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as d:
        os.symlink(os.path.join(os.path.dirname(os.path.abspath(readme)), "sample_data"),
                   os.path.join(d, "sample_data"))
        os.chdir(d)
        scope = {"__name__": "readme"}
        for i, code in enumerate(blocks):
            try:
                exec(compile(code, f"README.md python block {i + 1}", "exec"), scope)
            except Exception as e:  # noqa: BLE001 - any failure of an example is the finding
                check(False, f"README python block {i + 1} raised {type(e).__name__}: {e}")
    return finish("README python examples")


if __name__ == "__main__":
    sys.exit(main())
