#!/usr/bin/python3
"""Regenerates sample_data/hdf5/filters.h5: the same small datasets stored with each HDF5
compression filter that h5py and hdf5plugin write, for tests/test_hdf5.cpp (Hdf5Filters).

    /usr/bin/python3 sample_data/hdf5/make_filters.py

Needs Debian's python3-h5py and python3-hdf5plugin (scripts/setup.sh installs both) and the
plugins of hdf5-filter-plugin, hdf5-filter-plugin-blosc-serial and
hdf5-filter-plugin-zfp-serial. The LZF datasets are written by h5py's own LZF filter.

/raw_u8: u8 NHWC (4, 12, 12, 3), chunked (2, 12, 12, 3), no filter; every other u8 dataset
holds the same values, and every chunk of them went through its filters. /raw_f32: f32 NHW
(3, 12, 12), likewise for the f32 datasets. /noise_blosc_stored_raw: random bytes (2, 12, 12, 3)
under blosc, which stored every chunk without it; /noise_u8 the same values unfiltered.
"""
import os

import h5py
import hdf5plugin
import numpy as np

HERE = os.path.relpath(os.path.dirname(os.path.abspath(__file__)))


def images(n=4, h=12, w=12):
    """Colour gradients in flat 2x2 tiles: values every compressor shrinks (a chunk that a filter
    cannot shrink is stored without it, and would test nothing), not constant."""
    y, x = np.mgrid[0:h, 0:w] // 2
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        img = np.stack([40 + 25 * ((c + 1) * x + (i + 1) * y % 7) for c in range(3)], -1)
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def noise(n=2, h=12, w=12):
    """Random bytes, which no compressor shrinks."""
    return np.random.default_rng(32001).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def fields(n=3, h=12, w=12):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    return np.stack([np.exp(-((x - 4 * i) ** 2 + (y - 8) ** 2) / 30.0) * 100 - 20 for i in range(n)]
                    ).astype(np.float32)


def main():
    u8, f32 = images(), fields()
    chunk_u8, chunk_f32 = (2, 12, 12, 3), (1, 12, 12)
    u8_filters = {
        "raw_u8": {},
        "gzip_shuffle": dict(compression="gzip", compression_opts=6, shuffle=True),
        "lzf": dict(compression="lzf"),
        "lzf_shuffle": dict(compression="lzf", shuffle=True),
        "blosc_lz4": dict(hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE)),
        "blosc_zstd": dict(hdf5plugin.Blosc(cname="zstd", clevel=5)),
        "lz4": dict(hdf5plugin.LZ4()),
        "bzip2": dict(hdf5plugin.BZip2()),
        "fletcher32": dict(fletcher32=True),
        "scaleoffset": dict(scaleoffset=0),
        "szip": dict(compression="szip"),
    }
    f32_filters = {
        "raw_f32": {},
        "f32_lzf": dict(compression="lzf", shuffle=True),
        "f32_zfp_reversible": dict(hdf5plugin.Zfp(reversible=True)),
    }
    path = os.path.join(HERE, "filters.h5")
    with h5py.File(path, "w", libver="latest") as f:  # compact chunk indexes
        for name, opts in u8_filters.items():
            f.create_dataset(name, data=u8, chunks=chunk_u8, **opts)
        for name, opts in f32_filters.items():
            f.create_dataset(name, data=f32, chunks=chunk_f32, **opts)
        # Blosc is optional, as every third-party filter h5py writes: it stores these chunks
        # without it (their filter mask says so), and they read without its plugin.
        f.create_dataset("noise_u8", data=noise(), chunks=chunk_u8)
        f.create_dataset("noise_blosc_stored_raw", data=noise(), chunks=chunk_u8,
                         **hdf5plugin.Blosc(cname="lz4"))
    with h5py.File(path, "r") as f:  # every dataset reads back as written, every chunk filtered
        for names, values in ((u8_filters, u8), (f32_filters, f32)):
            for name in names:
                d = f[name]
                assert np.array_equal(d[()], values), name
                masks = {d.id.get_chunk_info(i).filter_mask for i in range(d.id.get_num_chunks())}
                assert masks == {0}, f"{name}: chunks stored without a filter: {masks}"
        d = f["noise_blosc_stored_raw"]
        assert np.array_equal(d[()], f["noise_u8"][()])
        assert all(d.id.get_chunk_info(i).filter_mask == 1 for i in range(d.id.get_num_chunks()))
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
