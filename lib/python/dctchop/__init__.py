"""dctchop: DCT+Chop archives (.dcz) as NumPy arrays, and a training loader.

    import dctchop
    with dctchop.Archive("train.dcz") as a:
        x = a.read(0, 16)          # 16 decoded samples: (16, *a.sample_shape), e.g. (16, H, W, C)
        y = a.labels()             # the labels side array, or None
        first, last = a[0], a[-1]  # one sample each; a[2:5] is three

    dctchop.compress(x_train, "train.dcz", chop=4, labels=y_train)  # a NumPy array in

    loader = dctchop.Loader("train.dcz", batch_size=64, seed=1, rank=0, world=1)
    for x, y in loader:            # one epoch of shuffled batches (len(loader) of them)
        ...
    state = loader.state()         # save beside a checkpoint; loader.restore(state) resumes

Errors are dctchop.Error, with `kind` the error's name ("io", "corrupt", "bad_input", ...);
bad arguments and values are also ValueError (dctchop.ArgumentError), I/O failures OSError
(dctchop.FileError) with `errno` set where the system gave one, and then also the built-in
FileExistsError (an output that is there without overwrite=True), FileNotFoundError,
PermissionError, IsADirectoryError or NotADirectoryError, as open() raises them; a sample out of range is
IndexError (dctchop.SampleIndexError, kind "out_of_range").
"""
import json
import operator
import os
import re

import numpy as np

from ._dctchop import (_MAX_THREADS, ArgumentError, Error, FileError, SampleIndexError, _Archive,
                       __version__, _compress, _Loader, decode_matrices as _decode_matrices)


def _out_of_range(message):
    """SampleIndexError(message), of kind 'out_of_range' (an IndexError and a dctchop.Error)."""
    e = SampleIndexError(message)
    e.kind = "out_of_range"
    return e


def _reduce_error(self):
    """Pickles a dctchop error whole: its message, its kind and, for an OSError, its errno,
    which OSError's own pickling leaves out when the message alone is its argument."""
    state = dict(vars(self))
    args = self.args
    if isinstance(self, OSError):
        for key in ("errno", "strerror") + (("filename",) if len(args) == 1 else ()):
            if getattr(self, key) is not None:
                state[key] = getattr(self, key)
        if self.filename is not None and len(args) == 2:  # (OSError(errno, strerror, filename)
            # keeps the file name out of args)
            args = args + (self.filename,) + ((self.filename2,) if self.filename2 is not None else ())
    return (type(self), args, state or None)


Error.__reduce__ = _reduce_error
Error.kind = None  # an error made from a message alone (a DataLoader worker's, re-raised)
# FileError(errno, strerror[, filename]) sets errno and strerror as OSError(...) does: its
# first base (Error, a RuntimeError) would otherwise take the arguments as a message alone.
FileError.__init__ = OSError.__init__


def _file_error_str(self):
    """dctchop's one line, which names the file and says what is wrong: errno, strerror and
    filename are set as open() sets them, and OSError's str() would be made of those alone."""
    return str(self.args[0]) if len(self.args) == 1 else OSError.__str__(self)


FileError.__str__ = _file_error_str


class _naming:
    """Gives an OSError raised within it the file name `path` (as given), where the library
    left it None: e.filename as open() sets it."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, e, traceback):
        if isinstance(e, OSError) and e.filename is None:
            e.filename = self.path if isinstance(self.path, (str, bytes)) else os.fspath(self.path)
        return False

__all__ = ["Archive", "ArgumentError", "Error", "FileError", "Loader", "SampleIndexError",
           "compress", "decode_matrices", "__version__"]


def _as_again(e, text):
    """An error of e's class (FileNotFoundError, ArgumentError, ...), with its kind and errno,
    saying `text`: so that `except OSError` and the rest catch it as they catch e."""
    again = type(e)(text)
    again.__dict__.update(e.__dict__)  # kind
    if isinstance(e, OSError):
        again.errno, again.strerror, again.filename = e.errno, e.strerror, e.filename
    return again


def _is_path(x):
    return isinstance(x, (str, bytes)) or hasattr(x, "__fspath__")


def _path(path):
    """path (str, bytes or os.PathLike) as the bytes the library opens: any name the file
    system holds, UTF-8 or not. (A missing file is the library's to say: it raises
    FileNotFoundError, a dctchop.FileError, with errno and kind set.)"""
    if _is_path(path):
        name = os.fsencode(os.fspath(path))
        if not name:
            raise _bad_argument("empty path: name a file")
        if b"\0" in name:
            raise _bad_argument(f"path {os.fsdecode(name)!r}: embedded null byte")
        return name
    raise TypeError(f"expected a path (str, bytes or os.PathLike), not {type(path).__name__}")


def _shown(name):
    """A path as messages show it: a byte that is not UTF-8 as \\xe9, as the library's own
    messages have it (os.fsdecode's lone surrogate, \\udce9, cannot even be printed)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    # (a control character as the library's messages have it: a message is one line)
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(
        m.group(), f"\\x{ord(m.group()):02x}"), text)


def _error_of_kind(message, kind):
    """A dctchop.Error saying `message` of kind `kind`, of the class the C++ side raises for
    that kind: ArgumentError (a ValueError) for bad input or arguments."""
    e = (ArgumentError if kind in ("bad_input", "invalid_argument", "out_of_range")
         else Error)(message)
    e.kind = kind
    return e


def _bad_argument(message):
    """The ArgumentError (a dctchop.Error and a ValueError) that the C++ side raises too."""
    e = ArgumentError(message)
    e.kind = "invalid_argument"
    return e


def _integer(value, what):
    """value as an int: anything with __index__, as a list takes it (NumPy's integers, a 0-d
    integer array, a one-value integer tensor), but a bool (which operator.index takes from
    NumPy and torch); TypeError saying `what` otherwise."""
    try:
        if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what}, not {type(value).__name__}") from None


def _count(name, value, least, most=2**63 - 1):
    """value as an int in [least, most]; ArgumentError (or TypeError) naming it."""
    value = _integer(value, f"{name} must be an integer")  # (an int: a NumPy uint64 compared
    # with an int through float64, which rounds)
    if not least <= value <= most:
        bound = f"at least {least}" if value < least else f"at most {most}"
        raise _bad_argument(f"{name} must be {bound}, not {value}")
    return int(value)


def _block(value):
    """value as a block size, 4, 8, 16 or 32; ArgumentError (or TypeError) as the codec says it
    (a bound of 1, for block=0, would name a size that is no more valid)."""
    value = _integer(value, "block must be an integer")
    if value not in (4, 8, 16, 32):
        raise _bad_argument(f"block size {value} is not one of 4, 8, 16, 32")
    return int(value)


def _flag(name, value, none=False):
    """value as a bool: True, False (NumPy's too), 0, 1, or, where `none`, None for False (as
    torch's DataLoader takes shuffle=None); TypeError naming it for anything else (None for
    decode=True would hand out coefficients)."""
    if value is None and none:
        return False
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, not {value!r}")


def _number(name, value, check, expected):
    """value as a float for which check() holds; ArgumentError (or TypeError) naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not (np.isfinite(value) and check(value)):
        raise _bad_argument(f"{name} {value}: expected {expected}")
    return float(value)


def _native(a, name):
    """a as a C-contiguous array in native byte order (a view when it already is one)."""
    if a is None:
        raise TypeError(f"{name} must be an array, not None")
    if isinstance(a, np.ma.MaskedArray):
        raise _bad_argument(f"{name} is a masked array, whose mask would be lost: fill it "
                            "first (a.filled(value)), or pass nonfinite= for masked NaNs")
    given = a
    a = np.require(a, requirements=["C"])  # keeps a 0-d array 0-d, for its message
    if name == "data" and isinstance(given, (list, tuple)) and \
            (a.dtype == np.bool_ or (a.dtype.kind in "iu" and a.dtype.itemsize == 8)):
        # A list of Python ints (or bools): NumPy chose the type, not the caller.
        raise _bad_argument(f"{name} is a {type(given).__name__} that NumPy reads as "
                            f"{a.dtype.name}, which dctchop does not compress: make it an array "
                            f"of the type it holds, e.g. np.asarray({name}, np.uint8)")
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


# The command's option names in the library's messages, and what a Python caller passes.
# Phrases first, over the whole message (a folder named "f32" or "V" must not cut them).
_PHRASES = [(re.compile(r"(?<![\w./-])--(coeff|layout|offset) ([A-Za-z][A-Za-z0-9]+)\b"), r"\1='\2'"),
            (re.compile(r"(?<![\w./-])--nonfinite replace=([-+]?[0-9][0-9.eE+-]*|V)"), r"nonfinite=\1")]
_KEYWORDS = [("use -f to overwrite", "pass overwrite=True"),
             ("--no-quality", "quality=False"), ("--no-ssim", "measure_ssim=False"),
             ("--chunk-mb", "chunk_mb"), ("--coeff ", "coeff="), ("--offset ", "offset="),
             ("--ssim", "ssim="), ("--psnr", "psnr="), ("--chop", "chop="), ("-o ", "output "),
             ("--layout ", "layout="), ("--nonfinite", "nonfinite="), ("--threads", "threads")]
# An option only where it starts a word: "train--chop4.dcz" and "exp-o 1" are names.
_KEYWORD_RES = [(re.compile(r"(?<![\w./-])" + re.escape(flag)), keyword) for flag, keyword in _KEYWORDS]


def _in_python_terms(text, names=()):
    """A library message with the command's option names replaced by the keywords, a name
    given to one as the string Python takes ("--coeff f32" is coeff='f32', "--offset mean"
    offset='mean'). `names` (the output path, say) and their folders stay as they are."""
    for phrase, keyword in _PHRASES:
        text = phrase.sub(keyword, text)
    return _flags_in_python_terms(text, names)


def _flags_in_python_terms(text, names):
    """_in_python_terms's single options, outside `names` and their folders."""
    kept = set()
    for name in names:
        while name not in kept and name not in ("", "/", "."):
            kept.add(name)
            name = os.path.dirname(name.rstrip("/"))
    if kept:  # the text between the names, translated; the names as they are (whole: a
        # folder "a" is not the a of "replace")
        parts = re.split(r"(?<![\w./-])(" + "|".join(map(re.escape, sorted(kept, key=len, reverse=True)))
                         + r")(?![\w./-])", text)
        return "".join(p if i % 2 else _flags_in_python_terms(p, ()) for i, p in enumerate(parts))
    for flag, keyword in _KEYWORD_RES:
        text = flag.sub(keyword, text)
    return text


def compress(data, output, *, chop=None, block=8, coeff=None, layout="auto", labels=None,
             offset="auto", chunk_mb=4.0, overwrite=False, quality=True, measure_ssim=True,
             psnr=None, ssim=None, threads=0, nonfinite=None, progress=None):
    """Compress a NumPy array (i8, u8, i16, u16, i32, u32, f16, f32 or f64; samples along axis 0) into a .dcz
    archive, as `dctchop compress` does a file, and return its report as a dict (ratio,
    quality, the codec settings, ...; "notes" holds what the command would print as notes:
    the archive being larger than the input, i16 rounding on float data where quality is
    measured, ...). The array is read in place, not copied (other Python
    threads run meanwhile: do not change it until compress returns).

    chop (None: 4, or the one psnr / ssim choose), block, coeff ("f16", "bf16", "f32", "i16";
    None: the dtype's default), layout
    ("auto", "HW", "NHW", "NHWC", "NCHW"), chunk_mb, overwrite: as the command's options.
    labels: an array with one row per sample, stored losslessly. offset: "auto", "mean" (any case) or a
    number (--offset). quality=False skips measuring PSNR and SSIM, measure_ssim=False SSIM
    only. psnr / ssim: choose the smallest chop that reaches them instead (not with chop, as the
    command refuses --chop with --psnr); report["chop_search"] lists the measurements, and a
    target out of reach raises dctchop.Error (kind "quality_not_met") whose chop_search lists
    them. nonfinite: None (NaN or Inf is an error) or a finite number stored in their
    place. threads: 0 for every core. progress: None or a callable, called on this thread
    with (samples written, samples in total) as chunks are written, at most every 50 ms.

    Ctrl-C (KeyboardInterrupt), or an exception raised by progress, stops compress after the
    chunk at hand and propagates; the unfinished output is removed. Once the last chunk is
    written and checked, compress finishes: a Ctrl-C then is raised after it returns.

        report = dctchop.compress(x_train, "train.dcz", chop=4, labels=y_train)
        print(report["ratio"], report["quality"]["psnr_db"])
    """
    output_bytes = _path(output)
    output = os.fsdecode(output_bytes)
    if output == "-":
        raise _bad_argument("compress writes a file: name one (not -)")
    # Flags as the loaders take them (overwrite="False" overwrote).
    overwrite, quality, measure_ssim = (_flag("overwrite", overwrite), _flag("quality", quality),
                                        _flag("measure_ssim", measure_ssim))
    if not isinstance(layout, str):
        raise TypeError(f"layout must be a str, not {type(layout).__name__}")
    if coeff is not None and not isinstance(coeff, str):
        raise TypeError(f"coeff must be a str or None, not {type(coeff).__name__}")
    for name, a in (("data", data), ("labels", labels)):
        if isinstance(a, bytes) and (not a or b"\0" in a or len(a) > 4096):  # bytes of data
            how = ("load it: np.load(io.BytesIO(b))" if a.startswith(b"\x93NUMPY")  # a .npy's
                   else "make it one: np.frombuffer(b, dtype).reshape(shape)")
            raise TypeError(f"compress takes the {name} as an array, not a bytes object "
                            f"({len(a)} bytes): {how}")
        if _is_path(a):
            shown = repr(a) if len(repr(a)) <= 200 else repr(a)[:200] + "..."
            raise TypeError(f"compress takes the {name} as an array, not the path {shown}: "
                            "np.load it, or run `dctchop compress` on the file")
    data = _native(data, "data")
    if labels is not None:
        labels = _native(labels, "labels")
    if isinstance(offset, str) and offset.lower() in ("auto", "mean"):  # any case, as --offset
        rule, value = offset.lower(), 0.0
    elif isinstance(offset, (int, float, np.integer, np.floating)) and not isinstance(offset, bool) \
            and np.isfinite(offset):
        rule, value = "value", float(offset)
    else:
        raise _bad_argument(f"offset {offset!r}: expected 'auto', 'mean' or a finite number")
    if psnr is not None:
        psnr = _number("psnr", psnr, lambda v: True, "a finite number of dB")
    if ssim is not None:
        ssim = _number("ssim", ssim, lambda v: -1 <= v <= 1, "a number in [-1, 1]")
    if chop is not None and (psnr is not None or ssim is not None):
        raise _bad_argument(f"chop={chop!r} with {'psnr' if psnr is not None else 'ssim'}=: give "
                            "one (the target chooses the chop)")
    # As the command refuses --psnr/--ssim with --no-quality or --no-ssim.
    if (psnr is not None or ssim is not None) and not quality:
        raise _bad_argument("psnr= and ssim= measure the data to choose the chop: they need "
                            "quality=True")
    if ssim is not None and not measure_ssim:
        raise _bad_argument("ssim= measures SSIM to choose the chop: it needs measure_ssim=True")
    if nonfinite is not None:
        nonfinite = _number("nonfinite", nonfinite, lambda v: True, "None or a finite number")
    chunk_mb = _number("chunk_mb", chunk_mb, lambda v: 0 < v <= 4096, "a number in (0, 4096]")
    if progress is not None and not callable(progress):
        raise _bad_argument(f"progress {progress!r}: expected None or a callable (done, total)")
    trials = []  # a failed psnr / ssim search's measurements (JSON texts)
    try:
        report = _compress(data, output_bytes, labels, _block(block),
                           _count("chop", 4 if chop is None else chop, 1, 32), coeff or "",
                           layout, rule, value, chunk_mb, overwrite, quality,
                           measure_ssim, psnr, ssim, _count("threads", threads, 0, _MAX_THREADS),
                           nonfinite, progress, trials)
    except Error as e:
        if isinstance(e, OSError) and e.filename is None:  # (as _naming: of the output)
            e.filename = output
        if trials:  # what the search measured before it gave up, as report["chop_search"]
            e.chop_search = [json.loads(t) for t in trials]
        # The library's messages name the command's options: name the keywords instead.
        text = _in_python_terms(str(e), (output,))
        if text == str(e):
            raise
        raise _as_again(e, text) from None
    result = json.loads(report)
    result["notes"] = [_in_python_terms(n, (output,)) for n in result["notes"]]
    result.update(backend="cpu", input="<array>")  # as compress --json has them (and output)
    return result


def decode_matrices(block, chop, height, width, dtype=np.float64):
    """Lt (Hp x Kh) and R (Kw x Wp) of the matrix-form decode of an H x W plane: the plane is
    (Lt @ C @ R)[:H, :W] + offset, C its coefficient plane (Kh x Kw). Computed in float64 and
    rounded to `dtype` (np.float32 or np.float16 for a device that multiplies in them; f16
    matrices can put u8 values one step off). Archive.offset is the offset. Another dtype
    than a real float one raises TypeError (an integer one truncates every entry to 0)."""
    try:
        kind = np.dtype(dtype).kind
    except (TypeError, ValueError):
        kind = None
    if kind != "f":
        raise TypeError(f"dtype must be a float type (np.float32, np.float16, np.float64), "
                        f"not {dtype!r}")
    lt, r = _decode_matrices(_block(block), _count("chop", chop, 1, 32),
                             _count("height", height, 1), _count("width", width, 1))
    return lt.astype(dtype, copy=False), r.astype(dtype, copy=False)


def _reopened(absolute, threads, name, closed, header=None, identity=None):
    """An unpickled Archive (Archive.__reduce__). A closed one comes back closed from its
    header alone, without its file (which may be gone since). An open one is opened again by
    its path, and must be the same archive: another file renamed over it since (compress
    with overwrite=True) would pair the pickled object's labels and length (an
    ArchiveDataset's, in a DataLoader worker) with the new file's samples."""
    def from_header():
        a = Archive.__new__(Archive)
        _Archive.__init__(a, absolute, header)
        a._threads, a._name, a._absolute = threads, name, absolute
        return a

    if closed and header is not None:
        return from_header()
    try:
        a = Archive(absolute, threads)
    except (Error, OSError) as e:
        if header is None:  # (an older pickle)
            raise
        # Gone, unreadable, not an archive: said at the first read, as for a replaced one.
        a = from_header()
        a._replaced = f"{_shown(name)}: cannot be opened again for this Archive's copy: {e}"
        a._replaced_kind = getattr(e, "kind", None) or "bad_input"
        a._replaced_error = e  # raised again of its class: a missing file a FileNotFoundError
        if isinstance(e, OSError):
            e.filename = name  # (the name its message shows, not the bytes it was opened by)
        return a
    a._name = name
    if identity is not None and a._identity() != identity:
        # Raised when it is read, not here: a DataLoader worker that fails while it unpickles
        # its dataset dies before PyTorch can send the error on ("worker exited unexpectedly").
        a.close()
        a._replaced = (f"{_shown(name)}: another archive has its name since this Archive was "
                       "pickled (the file was replaced): open the new one anew")
        return a
    if closed:
        a.close()
    return a


class Archive(_Archive):
    """A .dcz archive opened for reading: its header as properties (samples, shape, dtype,
    block, chop, coeff, layout, offset, planes, height, width; sample_shape, one sample's
    shape), decoded samples with read()
    or indexing, stored coefficients with read_coefficients(), and the labels. `threads`
    decodes on that many threads (0: every core). A context manager; close() releases the
    file. Picklable (it reopens by path), so it crosses to DataLoader worker processes."""

    def __init__(self, path, threads=0):
        name = _path(path)
        with _naming(path):
            super().__init__(name, _count("threads", threads, 0, _MAX_THREADS))
        self._threads = threads
        self._name = os.fsdecode(name)
        self._absolute = os.path.abspath(name)  # for pickling: the same file from any folder

    @property
    def path(self):
        """The path as given (a str; a name that is not UTF-8 keeps its bytes as surrogates,
        as os.fsdecode gives them)."""
        return self._name

    def __len__(self):
        return self.samples

    def _first(self, first):
        """`first` as an int that the library takes; out of int64 is out of range."""
        first = _integer(first, "first must be an integer")
        if not -2**63 <= first < 2**63:
            raise _out_of_range(f"sample {first}: out of range; {_shown(self.path)} has "
                                f"{self.samples} "
                                "samples")
        return int(first)

    _replaced = None  # why a copy refuses to read: another file has its name (_reopened)
    _replaced_kind = "bad_input"  # or the kind of the error that opening it again raised
    _replaced_error = None  # that error

    def _check_same(self):
        if self._replaced is not None:
            if self._replaced_error is not None:
                raise _as_again(self._replaced_error, self._replaced)
            raise _error_of_kind(self._replaced, self._replaced_kind)

    def labels(self):
        """The labels side array, or None."""
        self._check_same()
        return super().labels()

    def read_labels(self, first, count=1):
        """Labels of samples [first, first + count), shape (count, *label shape), or None
        without labels: only those rows are read (labels may be as large as the data), the
        whole array checked against its checksum, in pieces, at the first call."""
        self._check_same()
        return super().read_labels(self._first(first), _count("count", count, 0))

    def read(self, first, count=1):
        """Decoded samples [first, first + count) as an array of shape (count, *sample_shape)
        (first from 0; archive[i] counts from the end for a negative i). IndexError outside
        the archive."""
        self._check_same()
        return super().read(self._first(first), _count("count", count, 0))

    def read_coefficients(self, first, count=1):
        """Samples [first, first + count) as stored: coefficient bytes, uint8 of shape (count,
        bytes per sample) (dctchop.torch.coefficient_planes makes planes of them)."""
        self._check_same()
        return super().read_coefficients(self._first(first), _count("count", count, 0))

    @property
    def sample_shape(self):
        """The shape of one decoded sample, as archive[i] gives it; read(first, n) gives
        (n, *sample_shape). shape[1:] for NHW, NHWC and NCHW archives; for an HW archive (one
        image, stored without a sample axis) the whole of shape."""
        shape = tuple(self.shape)
        return shape if self.layout == "HW" else shape[1:]

    def __getitem__(self, index):
        """archive[i]: sample i (negative from the end); archive[i:j:k]: those samples, as
        for a list (a step other than 1 reads the span and keeps every k-th)."""
        if isinstance(index, slice):
            first, stop, step = index.indices(self.samples)
            if step == 1:
                return self.read(first, max(0, stop - first))
            picked = range(first, stop, step)
            if len(picked) == 0:
                return self.read(0, 0)
            low, high = min(picked), max(picked)
            if 2 * len(picked) > high - low:  # most of the span: one read of it
                return self.read(low, high - low + 1)[np.asarray(picked) - low]
            out = np.empty((len(picked), *self.sample_shape), self.dtype)
            for k, i in enumerate(picked):  # a sample here and there: those alone
                out[k] = self.read(i, 1)[0]
            return out
        index = _integer(index, "archive indices are integers or slices")
        i = index + (self.samples if index < 0 else 0)
        if not 0 <= i < self.samples:
            raise _out_of_range(f"sample {index}: out of range; {_shown(self.path)} has "
                                f"{self.samples} "
                                "samples")
        return self.read(i, 1)[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __reduce__(self):
        # Opened again by its absolute path (a worker may run in another folder), shown by the
        # path as given, and closed again if it was (then from its header, without the file).
        if self.closed:
            return (_reopened, (self._absolute, self._threads, self._name, True, self._header_json()))
        return (_reopened, (self._absolute, self._threads, self._name, False,
                            self._header_json(), self._identity()))

    def __repr__(self):
        state = "closed" if self.closed else f"{self.samples} samples"
        return (f"dctchop.Archive({self.path!r}: {state}, shape {self.shape}, "
                f"{np.dtype(self.dtype).name}, block {self.block} chop {self.chop} {self.coeff})")


class _ClosedLoader:
    """The inner loader of a closed loader's copy, which needs no file (it may be gone since):
    as for a closed loader, len() (batches_per_epoch) still answers and every other use but
    close() raises ArgumentError."""
    closed = True

    def __init__(self, batches_per_epoch=None):
        if batches_per_epoch is not None:  # (None: pickled before it was kept)
            self.batches_per_epoch = batches_per_epoch

    def close(self):
        pass

    def __getattr__(self, name):
        raise _bad_argument("the loader is closed")


class _UnreadLoader(_ClosedLoader):
    """The inner loader of a copy that cannot read what the pickled loader read (another file
    has its name since, or none can be opened): len() answers as the pickled one's; a batch,
    state() and the rest raise dctchop.Error saying why (of kind bad_input, or the kind of the
    error that opening it raised). Then, not while unpickling, where a DataLoader worker
    would die without passing the error on."""
    closed = False

    def __init__(self, why, batches_per_epoch=None, kind="bad_input", error=None):
        super().__init__(batches_per_epoch)
        self._why, self._kind, self._error = why, kind, error

    def close(self):
        self.closed = True

    def __getattr__(self, name):
        if self.closed:
            raise _bad_argument("the loader is closed")
        if self._error is not None:  # (of its class: a missing file a FileNotFoundError)
            raise _as_again(self._error, self._why)
        raise _error_of_kind(self._why, self._kind)


def _identity_of(path):
    """Archive._identity of the archive at `path` (header and index digest), which a loader's
    copy compares with its file's; None where it cannot be opened."""
    try:
        with Archive(path, 1) as a:
            return a._identity()
    except Error:
        return None


def _reloaded(kind, absolute, options, state, resumed, last, closed, batches_per_epoch=None,
              identity=None):
    """An unpickled loader (_Batches.__reduce__): made again from the same file and options,
    then moved to where the pickled one stood; a closed one, closed without opening its file.
    Where the file is no longer the pickled loader's (`identity`: none in older pickles), the
    copy raises dctchop.Error from its first batch on, as an Archive's copy does."""
    def unread(why, error_kind="bad_input", error=None):
        loader = kind.__new__(kind)
        _Batches.__init__(loader, _UnreadLoader(why, batches_per_epoch, error_kind, error),
                          absolute, options)
        loader.last_samples, loader.last_epoch = last
        return loader

    if closed:
        loader = kind.__new__(kind)
        _Batches.__init__(loader, _ClosedLoader(batches_per_epoch), absolute, options)
        loader.last_samples, loader.last_epoch = last
        return loader
    try:
        loader = kind(absolute, **options)
    except Error as e:
        if identity is None:
            raise
        if isinstance(e, OSError):
            e.filename = os.fsdecode(absolute)  # (as its message shows it)
        return unread(f"{_shown(absolute)}: cannot be opened again for this "
                      f"{kind.__name__}'s copy: {e}", getattr(e, "kind", None) or "bad_input", e)
    if identity is not None and loader._identity != identity:
        loader.close()
        return unread(f"{_shown(absolute)}: another archive has its name since this "
                      f"{kind.__name__} was pickled (the file was replaced): open the new one "
                      "anew")
    loader.restore(state)
    loader._resumed = resumed
    loader.last_samples, loader.last_epoch = last
    return loader


class _Batches:
    """What the two loaders share: epochs, state and restore, and pickling."""

    def __init__(self, inner, path, options, identity=None):
        self._l = inner
        self._got = None  # the serial of the last batch this object received (Loader)
        self.last_samples = None  # global sample indices of the last batch
        self._resumed = False  # restore() was called since the last iter()
        self._absolute = os.path.abspath(path)  # for pickling: the same file from any folder
        self._options_given = options
        self._identity = identity  # the file's (Archive._identity), which a copy compares

    def __reduce__(self):
        # A loader holds a prefetch thread and an open file, which cannot cross to another
        # process; its file, options and state() can: the copy opens the file again (by its
        # absolute path) and restores the state, so its next batch is the one this loader
        # would give. A closed loader comes back closed.
        closed = self.closed
        state = None if closed else self.state()
        try:
            batches = self.batches_per_epoch
        except Error:  # a closed copy from a pickle made before it was kept
            batches = None
        return (_reloaded, (type(self), self._absolute, self._options_given, state,
                            self._resumed, (self.last_samples, self.last_epoch), closed, batches,
                            self._identity))

    @staticmethod
    def _options(batch_size, shuffle_window, rank, world, prefetch, seed):
        """The options as ints (anything with __index__ given), each checked."""
        batch_size = _count("batch_size", batch_size, 1)
        world = _count("world", world, 1, 2**31 - 1)
        rank = _count("rank", rank, 0, 2**31 - 1)
        if rank >= world:
            raise _bad_argument(f"rank {rank} is outside 0..{world - 1} (world {world})")
        shuffle_window = _count("shuffle_window", shuffle_window, 0)  # 0 is taken as 1
        prefetch = _count("prefetch", prefetch, 0, 1024)  # batches held ahead (max_prefetch)
        return batch_size, shuffle_window, rank, world, prefetch, _count("seed", seed, 0, 2**64 - 1)

    @property
    def batches_per_epoch(self):
        """Batches in one epoch of this rank: len(loader)."""
        return self._l.batches_per_epoch

    def __iter__(self):
        """`for x, y in loader:` is one whole epoch, len(loader) batches, as for a torch
        DataLoader: a loop that would start inside an epoch (after next(loader), or after a
        loop left with break) starts the next epoch instead, and the samples left in that one
        are not handed out. Right after restore() a loop finishes the restored epoch.
        next(loader) goes on across epochs; epoch() gives the rest of the current one."""
        resumed, self._resumed = self._resumed, False
        state = self.state()
        if not resumed and 0 < state["position"] < self.batches_per_epoch:
            state.update(epoch=state["epoch"] + 1, position=0)
            self._l.restore(json.dumps(state))
        return self.epoch()

    def __len__(self):
        """Batches per epoch, as len() of a torch DataLoader."""
        return self.batches_per_epoch

    def epoch(self):
        """The rest of the current epoch's batches (a whole epoch from a fresh start). The
        generator belongs to that epoch: where restore() moves the loader to another epoch
        meanwhile, it ends there, without a batch of the other one (a new epoch() or loop
        then gives the rest of the restored epoch)."""
        epoch = self.state()["epoch"]
        while True:
            state = self.state()
            if state["epoch"] != epoch or state["position"] >= self.batches_per_epoch:
                return
            # The batch held (self._got) only here, with nothing that checks for signals
            # between that and the yield: a Ctrl-C as next(self) returned lost it.
            batch, serial, samples, in_epoch = self._take()
            self._got = serial
            self.last_samples, self.last_epoch = samples, in_epoch
            yield batch

    def _take(self):
        """The next batch, its serial (which the loader keeps, handing the batch out again,
        until self._got says this object holds it), its samples and epoch. DeviceLoader:
        its next batch, serial None."""
        batch = next(self)
        return batch, None, self.last_samples, self.last_epoch

    def state(self):
        """Where the loader stands, as a dict to save: epoch, position, seed, and how this
        loader cuts the archive into batches (samples, batch_size, shuffle, shuffle_window,
        rank, world, drop_last), which restore() checks."""
        return json.loads(self._l.state(self._got))

    def restore(self, state):
        """Continue from a saved state: the next batch is the one that was next then. The
        state's seed goes on; a state of a loader with another batch size, shard or shuffle
        raises ValueError."""
        if not isinstance(state, dict):
            raise TypeError(f"restore takes the dict that state() returned, not {type(state).__name__}")
        # Values that went through NumPy (np.savez and np.load) are NumPy scalars or 0-d
        # arrays; through a torch checkpoint, 0-d tensors: their .item() (the number).
        def plain(v):  # (NumPy scalars have ndim 0 too)
            return v.item() if getattr(v, "ndim", None) == 0 and callable(
                getattr(v, "item", None)) else v
        try:
            text = json.dumps({k: plain(v) for k, v in state.items()})
        except RecursionError:  # (lists in lists, deeper than Python's json goes)
            raise _bad_argument("not a loader state: it nests lists and dicts more than 256 "
                                "deep") from None
        self._l.restore(text)
        self._resumed = True

    def set_epoch(self, epoch):
        """Go to the start of epoch `epoch` (from 0): its first batch is next, and a loop
        gives that whole epoch, in its own order. As DistributedSampler.set_epoch: a loader
        made anew for each epoch (in an IterableDataset's __iter__, in DataLoader workers)
        otherwise starts at epoch 0, in the same order, every time."""
        state = self.state()
        state.update(epoch=_count("epoch", epoch, 0, 2**64 - 2), position=0)  # (as restore takes)
        self.restore(state)

    def state_dict(self):
        """state(), under the name PyTorch's checkpointing (the Stateful protocol) calls."""
        return self.state()

    def load_state_dict(self, state_dict):
        """restore(), under the name PyTorch's checkpointing calls."""
        self.restore(state_dict)

    def close(self):
        """Stop the prefetch thread and release the file (the batches handed out stay valid:
        a DeviceLoader's tensors keep their buffers, not the loader); using the loader
        afterwards raises ValueError, but for len() (batches_per_epoch), closed, last_samples
        and last_epoch, which stay readable, in a pickled copy too. Also
        `with Loader(...) as l:`."""
        self._l.close()

    @property
    def closed(self):
        """Whether close() was called."""
        return self._l.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def epoch_order(self, epoch):
        """This rank's samples of an epoch, in order (int64, which torch.as_tensor takes)."""
        epoch = _count("epoch", epoch, 0, 2**64 - 1)  # as restore() and last_epoch take them
        return np.asarray(self._l.epoch_order(epoch), dtype=np.int64)


class Loader(_Batches):
    """Batches from an archive: shuffled reproducibly (differently each epoch, and chunk by
    chunk), sharded by (rank, world), prefetched on a background thread, resumable.

    Each batch is (data, labels): data a NumPy array (batch, *sample shape) of the archive's
    dtype (or, with decode=False, the raw coefficient bytes), labels a NumPy array in the
    labels' own dtype and shape, or None. After each batch, last_samples holds its samples'
    indices in the archive and last_epoch its epoch. `threads` decodes each chunk on that many
    threads (0: every core) on the prefetch thread. Each rank takes a contiguous slice of
    the epoch's order, and every rank gets the same number of batches: without drop_last
    the last slice wraps around to the start (as DistributedSampler pads). Picklable:
    the copy opens the file again and goes on from this loader's state()."""

    def __init__(self, path, batch_size=32, shuffle=True, seed=0, shuffle_window=4, rank=0,
                 world=1, drop_last=True, prefetch=2, decode=True, threads=1):
        shuffle, drop_last, decode = (_flag("shuffle", shuffle, none=True),
                                      _flag("drop_last", drop_last), _flag("decode", decode))
        batch_size, shuffle_window, rank, world, prefetch, seed = self._options(
            batch_size, shuffle_window, rank, world, prefetch, seed)
        threads = _count("threads", threads, 0, _MAX_THREADS)
        name = _path(path)
        options = dict(batch_size=batch_size, shuffle=shuffle, seed=seed,
                       shuffle_window=shuffle_window, rank=rank, world=world,
                       drop_last=drop_last, prefetch=prefetch, decode=decode, threads=threads)
        with _naming(path):
            loader = _Loader(name, batch_size, shuffle, seed, shuffle_window, rank, world,
                             drop_last, prefetch, decode, threads)
        super().__init__(loader, name, options, _identity_of(name))
        self.last_epoch = None

    def __next__(self):
        # The batch stays the loader's until self._got says this object holds it: a Ctrl-C
        # raised anywhere before that line (as the call returns, in astype) leaves it to be
        # handed out again by the next call, and state() before it meanwhile. From that line
        # to the return nothing checks for signals (no call).
        batch, serial, samples, epoch = self._take()
        self._got = serial
        self.last_samples, self.last_epoch = samples, epoch
        return batch

    def _take(self):
        data, labels, samples, epoch, _, serial = self._l.next(self._got)
        self._resumed = False  # a batch taken: a loop after it starts a new epoch
        # (int64: torch.as_tensor takes no uint64)
        return (data, labels), serial, samples.astype(np.int64), epoch
