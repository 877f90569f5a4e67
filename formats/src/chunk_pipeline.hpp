// Internal: the three-stage chunk pipeline of compress and decompress.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace dctchop::formats::detail {

/** The stages of run_chunks(). Chunks are numbered 0, 1, 2, ... in the order read() sees them;
 *  `slot` (0..slots-1) names the buffers a chunk travels in, and `worker` (0..workers-1) the
 *  worker thread that runs work(). */
struct chunk_stages {
  /** On the calling thread, in chunk order, one at a time: fill slot `slot` with chunk
   *  `chunk`. Returns false when there are no more chunks (the slot stays unused). */
  std::function<bool(std::uint64_t chunk, std::size_t slot)> read;
  /** Optional, on the calling thread: may throw to cancel the run. Called just before each
   *  read(), every tenth of a second while this thread waits for a free slot or for the
   *  writer to finish, and once after a read that failed (a cancel pending then is the
   *  cause: a watched read gives up on it, or a signal interrupted it), so that a signal is
   *  seen neither after a read that may block for ever on a stalled input pipe nor after a
   *  write blocked on a stalled output. A cancel stops every stage at once (no chunk before
   *  it is still worked or written) and its exception is the one run_chunks throws. */
  std::function<void()> before_read;
  /** Optional: set to true when before_read cancels the run; the outputs that write() uses
   *  watch it (output_file::watch with write_check, pipeline_util.hpp), so that a write
   *  blocked on a stalled pipe gives up. */
  std::atomic<bool>* stop_writes = nullptr;
  /** Optional: set to true when the run fails or is cancelled; the inputs that read() uses
   *  watch it (watch_reads in pipeline_util.hpp), so that a read blocked on a stalled pipe
   *  gives up instead of holding back the error. */
  std::atomic<bool>* stop_reads = nullptr;
  /** On a worker thread, several chunks at once in any order: transform the slot's chunk. */
  std::function<void(std::uint64_t chunk, std::size_t slot, unsigned worker)> work;
  /** On one writer thread, in chunk order, one at a time: write the slot's chunk out. */
  std::function<void(std::uint64_t chunk, std::size_t slot)> write;
};

/** Streams chunks through read -> work -> write with `workers` threads for work() and
 *  `slots` buffers in flight (workers + 2 lets reading and writing overlap the work; with one
 *  slot the stages take each chunk in turn). Reading stays on the calling thread: a read blocked on a pipe is the one a signal
 *  interrupts (the threads started here block SIGINT, SIGTERM, SIGHUP and SIGQUIT).
 *
 *  The first failure stops the pipeline; every chunk before it is still worked, so that the
 *  exception rethrown is that of the lowest-numbered chunk that failed (whatever its stage),
 *  the same one a sequential loop would meet first. Returns the number of chunks. */
std::uint64_t run_chunks(std::size_t slots, unsigned workers, const chunk_stages& stages);

}  // namespace dctchop::formats::detail
