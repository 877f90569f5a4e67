"""dctchop: DCT+Chop archives (.dcz) as NumPy arrays, and a training loader.

    import dctchop
    a = dctchop.Archive("train.dcz")
    x = a.read(0, 16)              # 16 decoded samples, shape (16, H, W, C)
    y = a.labels()                 # the labels side array, or None

    loader = dctchop.Loader("train.dcz", batch_size=64, seed=1, rank=0, world=1)
    for x, y in loader.epoch():    # one epoch of shuffled batches
        ...
    state = loader.state()         # save beside a checkpoint; loader.restore(state) resumes
"""
import json

import numpy as np

from ._dctchop import Archive, Error, __version__, _Loader, decode_matrices

__all__ = ["Archive", "Error", "Loader", "decode_matrices", "__version__"]


class _Batches:
    """What the two loaders share: epochs, state and restore."""

    def __init__(self, inner):
        self._l = inner
        self.last_samples = None  # global sample indices of the last batch

    @property
    def batches_per_epoch(self):
        return self._l.batches_per_epoch

    def __iter__(self):
        return self

    def epoch(self):
        """The rest of the current epoch's batches (a whole epoch from a fresh start)."""
        state = json.loads(self._l.state())
        for _ in range(state["position"], self.batches_per_epoch):
            yield next(self)

    def state(self):
        """Where the loader stands (epoch, position, seed), as a dict to save."""
        return json.loads(self._l.state())

    def restore(self, state):
        """Continue from a saved state: the next batch is the one that was next then."""
        self._l.restore(json.dumps(state))


class Loader(_Batches):
    """Batches from an archive: shuffled reproducibly (differently each epoch, and chunk by
    chunk), sharded by (rank, world), prefetched on a background thread, resumable.

    Each batch is (data, labels): data a NumPy array (batch, *sample shape) of the archive's
    dtype (or, with decode=False, the raw coefficient bytes), labels a NumPy array in the
    labels' own dtype and shape, or None."""

    def __init__(self, path, batch_size=32, shuffle=True, seed=0, shuffle_window=4, rank=0,
                 world=1, drop_last=True, prefetch=2, decode=True):
        super().__init__(_Loader(path, batch_size, shuffle, seed, shuffle_window, rank, world,
                                 drop_last, prefetch, decode))
        self.last_epoch = None

    def __next__(self):
        data, labels, samples, epoch, _ = self._l.next()
        self.last_samples = samples
        self.last_epoch = epoch
        return data, labels

    def epoch_order(self, epoch):
        """This rank's samples of an epoch, in order."""
        return np.asarray(self._l.epoch_order(epoch), dtype=np.uint64)
