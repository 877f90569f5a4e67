#!/usr/bin/python3
"""Regenerate the .npy samples in this folder (deterministic; needs NumPy).

    /usr/bin/python3 sample_data/npy/make_npy_samples.py

The values follow formulas that tests/test_npy.cpp recomputes, so the tests check values,
not only shapes:

  u8_nhwc.npy        (2, 8, 8, 3) |u1   (n*31 + h*7 + w*3 + c) % 256
  f32_nhw.npy        (2, 5, 7)    <f4   (n*100 + h*10 + w) * 0.5 - 3.25
  u16_be.npy         (3, 4)       >u2   r*4096 + c*257 + 258
  f32_fortran.npy    (4, 5)       <f4   r*10 + c + 0.5              fortran_order True
  f32_fortran_3d.npy (2, 3, 4)    <f4   i*100 + j*10 + k            fortran_order True
  v2.npy             (3, 5)       <i2   (r*5 + c) * -7 + 3          format version 2.0
  v3.npy             (2, 3)       <f8   r*3 + c + 0.125             format version 3.0
  labels_i64.npy     (10,)        <i8   (i - 5) * 1000000007000
  scalar_f64.npy     ()           <f8   2.5

Broken files, each refused with errc::bad_input:

  broken/truncated.npy       a copy of u8_nhwc.npy with its last 10 bytes cut off
  broken/object.npy          dtype=object (pickled)
  broken/bad_magic.npy       u16_be.npy with "NUMPY" changed to "NUMPX"
  broken/structured.npy      a structured dtype [('a', '<i4'), ('b', '<f4')]
  broken/bad_header.npy      a garbled dict (shape tuple not closed)
  broken/bad_version.npy     format version 9.0
  broken/complex.npy         complex64
"""
import io
import os

import numpy as np
from numpy.lib import format as npf

HERE = os.path.dirname(os.path.abspath(__file__))


def path(name):
    p = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def save(name, arr, version=None):
    with open(path(name), "wb") as f:
        npf.write_array(f, arr, version=version, allow_pickle=False)


def to_bytes(arr, **kw):
    buf = io.BytesIO()
    npf.write_array(buf, arr, **kw)
    return buf.getvalue()


def main():
    n, h, w, c = np.indices((2, 8, 8, 3))
    u8 = ((n * 31 + h * 7 + w * 3 + c) % 256).astype(np.uint8)
    save("u8_nhwc.npy", u8)

    n, h, w = np.indices((2, 5, 7))
    save("f32_nhw.npy", ((n * 100 + h * 10 + w) * 0.5 - 3.25).astype(np.float32))

    r, c = np.indices((3, 4))
    save("u16_be.npy", (r * 4096 + c * 257 + 258).astype(">u2"))

    r, c = np.indices((4, 5))
    f = np.asfortranarray((r * 10 + c + 0.5).astype(np.float32))
    assert f.flags.f_contiguous and not f.flags.c_contiguous
    save("f32_fortran.npy", f)

    i, j, k = np.indices((2, 3, 4))
    f3 = np.asfortranarray((i * 100 + j * 10 + k).astype(np.float32))
    save("f32_fortran_3d.npy", f3)

    r, c = np.indices((3, 5))
    save("v2.npy", ((r * 5 + c) * -7 + 3).astype(np.int16), version=(2, 0))

    r, c = np.indices((2, 3))
    save("v3.npy", (r * 3 + c + 0.125).astype(np.float64), version=(3, 0))

    i = np.arange(10, dtype=np.int64)
    save("labels_i64.npy", (i - 5) * 1000000007000)

    save("scalar_f64.npy", np.array(2.5, dtype=np.float64))

    # ---- broken ----
    good = to_bytes(u8)
    with open(path("broken/truncated.npy"), "wb") as f:
        f.write(good[:-10])

    obj = np.array([1, "two", None], dtype=object)
    with open(path("broken/object.npy"), "wb") as f:
        npf.write_array(f, obj, allow_pickle=True)

    be = to_bytes((r * 3 + c).astype(">u2"))
    with open(path("broken/bad_magic.npy"), "wb") as f:
        f.write(be.replace(b"NUMPY", b"NUMPX", 1))

    rec = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")])
    rec["a"] = [1, 2, 3]
    save("broken/structured.npy", rec)

    # A well-framed file whose dict is garbled: the shape tuple is never closed.
    dict_text = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }"
    hlen = len(dict_text) + 1
    pad = 64 - (10 + hlen) % 64
    header = dict_text + " " * pad + "\n"
    with open(path("broken/bad_header.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little"))
        f.write(header.encode("latin1"))
        f.write(np.zeros(6, dtype="<f4").tobytes())

    v = bytearray(to_bytes(np.arange(4, dtype=np.uint8)))
    v[6] = 9
    with open(path("broken/bad_version.npy"), "wb") as f:
        f.write(bytes(v))

    save("broken/complex.npy", np.array([1 + 2j, 3 - 4j], dtype=np.complex64))


if __name__ == "__main__":
    main()
