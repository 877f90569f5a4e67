/** @file file_io.hpp
 *  Plain files, stdin/stdout ("-"), and outputs that appear only when complete.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dctchop/error.hpp"

namespace dctchop::formats {

namespace detail {
class direct_writer;
}

/** error(io) "NAME: cannot ACTION: <errno's text>", carrying errno (error::os_errno): for a
 *  system call that just failed. */
error os_error(const std::string& name, const char* action);

/** A read-only input: a regular file (random access, optional memory map) or stdin ("-").
 *  Errors throw dctchop::error(io) naming the file. Never writes to its input. A read that a
 *  signal interrupts (EINTR: a handler installed without SA_RESTART) throws
 *  error(interrupted), and so does a write of output_file. */
class input_file {
 public:
  /** Open `path`; "-" is standard input, called `stdin_name` in messages. */
  static input_file open(const std::string& path, const std::string& stdin_name = "<stdin>");
  input_file(input_file&& other) noexcept;
  input_file& operator=(input_file&& other) noexcept;
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file();

  const std::string& path() const noexcept { return path_; }
  /** A name for messages: the path, or "<stdin>". */
  std::string display_name() const;
  /** True for regular files: size(), read_at() and map() work. */
  bool seekable() const noexcept { return seekable_; }
  /** File size in bytes (seekable files only). */
  std::uint64_t size() const noexcept { return size_; }
  /** Sequential read: returns fewer than n bytes only at end of file. */
  std::size_t read(void* dst, std::size_t n);
  /** Sequential read of exactly n bytes; a short read throws error(truncation_code()) with
   *  "truncated" and `what` in the message. */
  void read_exact(void* dst, std::size_t n, const char* what);
  /** Positioned read of exactly n bytes (seekable only); a read past the end throws
   *  error(truncation_code()). */
  void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what) const;
  /** read_at split into pieces of about `split_piece` bytes or more (plan_split) that up to
   *  `threads` threads
   *  read side by side, the calling thread one of them: a single reader copies from the page
   *  cache, or keeps an SSD's queue, at one core's pace (about half of what two give). The
   *  other threads are the file's own, started at its first split read and kept until it is
   *  closed (a thread's start costs about a tenth of what a piece takes to read). A thread
   *  the system will not start leaves its piece to the others; with none, or in a process
   *  forked after the file was opened, the calling thread reads every piece. Several threads
   *  may read one file at once. The same errors as read_at, the piece nearest the start
   *  first. */
  void read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what,
               unsigned threads) const;
  /** The smallest piece of a split read_at: a thread is not started for less. */
  static constexpr std::size_t split_piece = std::size_t(2) << 20;
  /** How a split read_at of `n` bytes at `offset` on `threads` threads goes: `count` pieces
   *  (at most 64; 1: unsplit), each about n / count bytes, the boundaries between them on
   *  page boundaries of the file (the page cache copies whole pages: no page is copied by two
   *  threads, or waited for by both when it is read from the disk). */
  struct split_plan {
    std::size_t count = 1;
    std::size_t bytes = 0;  ///< n
    std::size_t share = 0;  ///< n / count, rounded up
    std::size_t phase = 0;  ///< offset % page
    /** Where piece i begins, from the read's start (i = count: its end, n). */
    std::size_t start(std::size_t i) const noexcept {
      constexpr std::size_t page = 4096;
      if (i == 0) return 0;
      if (i >= count) return bytes;
      return (phase + i * share + page - 1) / page * page - phase;
    }
  };
  static split_plan plan_split(std::uint64_t offset, std::size_t n, unsigned threads) noexcept;
  /** What a file that ends too soon is: a corrupt archive (the default), or bad input for
   *  the dataset readers (NPY, NPZ, raw), also when it shrinks while it is read. */
  void set_truncation_code(errc code) noexcept { truncated_ = code; }
  errc truncation_code() const noexcept { return truncated_; }
  /** ": truncated: ", or for an archive (truncation_code() corrupt, the default) ": corrupt
   *  archive: truncated: ", as the archive's other damage is said. */
  const char* truncated_text() const noexcept {
    return truncated_ == errc::corrupt ? ": corrupt archive: truncated: " : ": truncated: ";
  }
  /** Bytes consumed by sequential reads so far. */
  std::uint64_t position() const noexcept { return position_; }
  /** Whether `fd` is open on this very file (the same device and inode). */
  bool same_file_as(int fd) const noexcept;
  /** Map the whole file read-only (seekable, non-empty files); nullptr when mapping fails. */
  const std::byte* map();
  /** For a stream (a pipe, FIFO or socket): a sequential read that waits for data calls
   *  `check` every tenth of a second meanwhile, and when a signal interrupts the wait;
   *  `check` may throw to give up (the work was cancelled, or failed elsewhere), else the
   *  read goes on. Regular files read as before; empty: no check. */
  void watch(std::function<void()> check) { check_ = std::move(check); }

 private:
  class read_crew;  // the threads of split reads (file_io.cpp)
  input_file() = default;
  void close() noexcept;
  /** Waits until the stream has data (or its end), calling check_ every tenth of a second. */
  void wait_readable();
  /** After a read found no data on a non-blocking descriptor: waits for some, with
   *  wait_readable where watched, else in poll(); a signal is error(interrupted), as in a
   *  blocking read. */
  void wait_for_data();
  /** read_at; `quiet`: on a thread that blocks the tool's signals, where an interrupted read
   *  (EINTR: another signal's handler, installed without SA_RESTART) is no request to stop
   *  and is read again. */
  void read_range(std::uint64_t offset, void* dst, std::size_t n, const char* what,
                  bool quiet) const;
  std::string path_;
  std::string stdin_name_ = "<stdin>";  // display_name() of "-"
  int fd_ = -1;
  bool owns_fd_ = false;
  bool seekable_ = false;
  std::uint64_t size_ = 0;
  std::uint64_t position_ = 0;
  void* map_ = nullptr;
  std::function<void()> check_;
  errc truncated_ = errc::corrupt;
  std::unique_ptr<read_crew> crew_;  // regular files only
};

/** Write-behind for a regular file written front to back (Linux; elsewhere it does nothing).
 *
 *  Left alone, the kernel starts writing dirty pages only when a share of memory is dirty, and
 *  the final fsync then waits for gigabytes at once while the disk sat idle; fresh page-cache
 *  pages also cost more than reused ones. So every `kick` bytes we start the write-out of what
 *  was written (sync_file_range WRITE), and once a range is `lag` bytes behind the write
 *  position we wait for it and drop it from the page cache: the disk works alongside the
 *  codec, dirty memory stays under `lag`, and the output does not evict the user's cache.
 *  A call that is not supported (a pipe, a file system without it) switches it off. A write
 *  error that the wait reports is kept for failure(): the kernel reports one to each open
 *  file only once, so the fsync that ends the output would not see it again. Not
 *  thread-safe: call from the one thread that writes. */
class write_behind {
 public:
  static constexpr std::uint64_t kick = std::uint64_t(8) << 20;
  static constexpr std::uint64_t lag = std::uint64_t(64) << 20;

  write_behind() = default;
  /** `fd` (not owned) must stay open while advance() is called. */
  explicit write_behind(int fd) : fd_(fd) {}
  /** Bytes [0, end) of the file have been written. */
  void advance(std::uint64_t end) noexcept;
  /** The errno of a write error that the write-out reported, one that says data was lost
   *  (EIO, ENOSPC, EDQUOT, EFBIG, EROFS; 0: none). Writing stops being helped after any
   *  failure; after one of these the caller must fail the output before it is published. */
  int failure() const noexcept { return failed_; }

 private:
  int fd_ = -1;
  int failed_ = 0;
  std::uint64_t started_ = 0;  // write-out started for [0, started_)
  std::uint64_t settled_ = 0;  // written to disk and dropped from the cache for [0, settled_)
};

/** The end of a file written through `behind`: fsync(fd) (EINVAL, nothing to flush, is no
 *  error), then any write error that `behind` kept, which that fsync no longer reports.
 *  error(io) naming `name` for either. */
void flush_written(int fd, const write_behind& behind, const std::string& name);

/** What an output path names, decided before anything is written. */
struct output_target {
  std::string path;       ///< where the finished file goes: the path, or the file its symlink names
  bool in_place = false;  ///< an existing FIFO or device (/dev/null): written into, not replaced
  bool fifo = false;      ///< in place, and a FIFO (its open waits for a reader)
  /** In place through this process's descriptor that the path names (/dev/stderr, /dev/fd/3
   *  of `3> out.npy`), open on a plain file; -1 for none. */
  int descriptor = -1;
  bool replaces = false;  ///< an existing regular file (-f): the new one takes its mode and owner
  unsigned mode = 0;      ///< the replaced file's permission bits (0777), when `replaces`
  unsigned uid = 0, gid = 0;  ///< and its owner
};

/** An output that appears at its path only when complete: bytes go to an unnamed file in the
 *  same folder (O_TMPFILE), which commit() links at the path (or, to overwrite, beside it and
 *  renames over the path). Destroyed without commit(), or killed, nothing is left. Where the
 *  file system has no O_TMPFILE, a hidden temporary file beside the path instead, removed
 *  when destroyed without commit(). "-" writes to standard output directly, and so does an
 *  existing FIFO or device (check_output_path) to itself. Replacing a file (-f) keeps its
 *  permission bits and owner, and a symlink's target is replaced, not the link.
 *
 *  A regular file is written with direct I/O (O_DIRECT) where the file system takes it: the
 *  bytes are gathered in aligned 8 MiB buffers that a background thread writes to the disk
 *  while the next one fills, with no page-cache copy. On a streaming job of gigabytes that
 *  keeps the disk busy alongside the computation, saves the kernel's copy, and leaves the
 *  user's page cache alone. The last partial block is written through the page cache. Where
 *  direct I/O is refused (tmpfs, some network file systems), or with direct_io = false, writes
 *  are buffered, with write_behind. The file's bytes are the same either way. */
class output_file {
 public:
  /** Create. An existing `path` is refused with error(output_exists) unless `overwrite`.
   *  An existing FIFO is opened in place, which waits for its reader: `waiting`, when given,
   *  is called about every 20 ms meanwhile, and may throw to give up. */
  static output_file create(const std::string& path, bool overwrite, bool direct_io = true,
                            const std::function<void()>& waiting = {});
  output_file(output_file&& other) noexcept;
  output_file& operator=(output_file&& other) noexcept;
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;
  ~output_file();

  const std::string& path() const noexcept { return path_; }
  std::string display_name() const;
  bool is_stdout() const noexcept { return is_stdout_; }
  /** Write all n bytes or throw error(io). */
  void write(const void* src, std::size_t n);
  /** Write `n` zero bytes. */
  void write_zeros(std::size_t n);
  /** Bytes written so far. */
  std::uint64_t position() const noexcept { return position_; }
  /** Everything written reaches the disk (direct I/O drained, fsync), short of the name:
   *  commit() then only names it. Once only; commit() calls it when it was not. */
  void flush_to_disk();
  /** Flush, fsync and rename into place. */
  void commit();
  /** commit() names the file without syncing its folder, which sync_folder() then does: for
   *  the first of two outputs that must appear together, so that the second is named at once
   *  after it (a folder's sync can take milliseconds, in which a SIGKILL left one alone). */
  void defer_folder_sync() noexcept { sync_folder_ = false; }
  /** After commit() with the sync deferred: sync_folder_of the finished file's folder, or,
   *  where it cannot be synced (a write-only drop box), the file once more, as commit()
   *  would have (best effort). */
  void sync_folder() noexcept;
  /** After commit(): unlink the file it named, when that replaced none (sample_sink::withdraw). */
  void withdraw() noexcept;
  /** Whether writes currently go to the disk with direct I/O. */
  bool direct() const noexcept { return direct_ != nullptr; }
  /** For a pipe, FIFO or socket: a write that waits for room (its reader has stalled) calls
   *  `check` every tenth of a second, and when a signal interrupts the wait; `check` may
   *  throw to give up (the work was cancelled, or failed elsewhere), else the write goes on.
   *  Without it a thread writing into a stalled pipe waits as long as the pipe does, and a
   *  signal meant to stop the work waits with it. Regular files and devices write as before;
   *  empty: no check. */
  void watch(std::function<void()> check);

 private:
  output_file() = default;
  void abandon() noexcept;
  void write_fd(const void* src, std::size_t n);
  /** write_fd for a watched stream: waits for room in steps, calling check_. */
  void write_watched(const char* p, std::size_t n);
  /** Writes go to fd_ as they come again; our own description of the pipe is closed. */
  void unwatch() noexcept;
  void name_anonymous();
  std::string path_;
  output_target target_;  // where the finished file goes (path_ is for messages)
  std::string temp_path_;
  int fd_ = -1;
  bool is_stdout_ = false;
  bool overwrite_ = false;
  bool committed_ = false;
  bool sync_folder_ = true;  // commit() syncs the folder (defer_folder_sync)
  int resync_fd_ = -1;       // the committed file, for sync_folder() when it was deferred
  bool flushed_ = false;  // flush_to_disk() done
  std::uint64_t position_ = 0;
  write_behind behind_;
  std::unique_ptr<detail::direct_writer> direct_;  // the direct I/O path, while in use
  // watch(): the check, and how a watched stream is written without blocking: through a
  // non-blocking description of the same pipe of our own (nb_fd_, so that the O_NONBLOCK of
  // a pipe shared with other processes stays as it is), with send(MSG_DONTWAIT) on a socket,
  // or PIPE_BUF bytes at a time once poll() says there is room.
  std::function<void()> check_;
  enum class watched { no, pipe, socket } watched_ = watched::no;
  int nb_fd_ = -1;
};

/** Checks an output path: one that exists is refused (error output_exists) unless
 *  `overwrite`, a directory is error io. A symlink is followed: the file it names is replaced
 *  and the link stays. A FIFO or character device (/dev/null, a pipe's /dev/fd/N) is written in
 *  place, without -f since nothing is replaced, a block device only with -f, and so is a
 *  plain file through the descriptor of this process that the path names (descriptor_named:
 *  /dev/stderr, /dev/fd/3 of `3> out.npy`), as the shell made it; with
 *  `regular_only` (a format that seeks back, HDF5) either is error invalid_argument. A path
 *  whose folder is missing (or a file) is error io. */
output_target check_output_path(const std::string& path, bool overwrite, bool regular_only = false);

/** Gives the output `fd` (as soon as it is created: a named temporary file is visible) the
 *  permission bits, and where allowed the owner, of the regular file it replaces (nothing
 *  when it replaces none), so that -f keeps a file's access rights; never set-user-ID or
 *  set-group-ID. Best effort: a failure leaves the new file's own. */
void keep_mode_and_owner(int fd, const output_target& t) noexcept;

/** The error (io) for a temporary file that could not be made beside `target`, errno saying
 *  why, naming `name`: a folder that is missing or not one, a folder that takes no new files
 *  (/proc), or the system's reason. */
[[noreturn]] void refuse_temp_file(const std::string& name, const std::string& target);

/** What earlier runs left beside the finished outputs `paths` (regular files; the file a
 *  symlink names; others are passed over): this user's ".NAME.tmpXXXXXXXXXXXX" files and
 *  folders (an HDF5 output's, or any output's where the file system has no O_TMPFILE: left by
 *  a SIGKILL, or another run's still at work) and ".NAME.oldXXXXXXXXXXXX" files (the old data
 *  that `decompress -f --labels-out` keeps: left as its only copy by a SIGKILL, or another
 *  run's); ".dctchop.*" for a name too long for those. Notes that say so, one a name; each
 *  folder read once, its first 100,000 entries; none where it cannot be read. */
std::vector<std::string> leftover_notes(const std::vector<std::string>& paths);

/** error(io) when another process (or this one, through another descriptor) holds an
 *  exclusive lock (flock) on the regular file `t` replaces, as HDF5 does on a file it
 *  writes: replaced, what it writes next would be lost. Nothing where `t` replaces no file. */
void refuse_locked_output(const output_target& t, const std::string& name);

/** Make a temporary file beside `path`, named ".NAME.tmpXXXXXXXXXXXX" (same folder, so that a
 *  rename into place is atomic): `try_create(candidate)` creates it exclusively and returns
 *  false when that name is taken (any other failure it throws, refuse_temp_file). `kind`
 *  (three letters) replaces "tmp": "old" names a file kept for putting back, which a crash
 *  may leave as the only copy of its data. Returns the name used; error(io) after 100 taken
 *  names. */
std::string create_temp_beside(const std::string& path,
                               const std::function<bool(const std::string&)>& try_create,
                               const char* kind = "tmp");

/** "/proc/self/fd/FD": a name that opens the very file (or folder) `fd` is open on, on Linux,
 *  whatever happens meanwhile to the names in its folder. */
std::string descriptor_path(int fd);

/** fsync the folder that holds `path` once a name is made or removed there, so that after a
 *  crash or a power cut the name is there (or gone) as surely as the data it names (synced
 *  before it was named). Best effort: the output is already complete and in place. False
 *  when the folder could not be synced (one this user cannot open, a write-only 0733 drop
 *  box; an I/O error); true also where the file system has nothing to sync (EINVAL). */
bool sync_folder_of(const std::string& path) noexcept;

/** The end of every output written under a temporary name: flush `fd` to disk (a descriptor
 *  of `temp`; -1: already flushed), then rename `temp` over `path`; without `overwrite`, link
 *  it there instead, which refuses a file that appeared at `path` since (error output_exists)
 *  rather than replace it; then sync the folder, so that the new name is as durable as the
 *  data. Where the folder cannot be synced (a write-only drop box), `resync_fd` (a descriptor
 *  of the same file; -1: none) is synced once more, which journaling file systems commit
 *  together with the new name. On failure `temp` is removed and error(io) names
 *  `display_name`. `sync_folder` false: the caller syncs the folder later (no resync). */
void publish_temp(int fd, const std::string& temp, const std::string& path,
                  const std::string& display_name, bool overwrite, int resync_fd = -1,
                  bool sync_folder = true);

/** True when `path` is read as a stream, once and in order: "-" (standard input, even
 *  redirected from a file), or a FIFO or device (`<(cmd)`, a named pipe). */
bool reads_as_stream(const std::string& path);

/** The regular file an output is about to replace (with -f), kept under a hidden name beside
 *  it (".NAME.oldXXXXXXXXXXXX", a hard link: no copy) until a second output has been named too, so that when that
 *  fails the first output's old file can be put back: two outputs of one command are both
 *  new or both old, never new data beside old labels. Nothing is kept where `path` names no
 *  regular file or the file system makes no hard link (then a failure of the second leaves
 *  the first replaced, as before). */
class kept_original {
 public:
  kept_original() = default;
  explicit kept_original(const std::string& path);
  kept_original(const kept_original&) = delete;
  kept_original& operator=(const kept_original&) = delete;
  /** Removes the kept name (the old file goes when nothing else links it). */
  ~kept_original();
  /** Puts the old file back in place of what replaced it; false when none was kept or the
   *  rename failed. */
  bool restore() noexcept;

 private:
  std::string target_, kept_;
};

/** True when `path` is a named pipe (FIFO), which is then opened for reading without waiting
 *  and closed: a refusal to read it does not leave its writer (`cat a.npz > p.npz &`) blocked
 *  in open() for ever; it sees the pipe closed instead. */
bool refused_fifo(const std::string& path);

/** True when both paths name the same existing file (same device and inode). `a` may be "-",
 *  standard input, when it is redirected from a regular file; `b` "-" is never the same. */
bool same_file(const std::string& a, const std::string& b);

/** True when standard output (or the descriptor `fd`: standard error) is a regular file that
 *  is the file `input` (or, for "-", the file standard input is redirected from):
 *  `-o - 1<>in.npy` would write over what it reads. */
bool is_standard_output(const std::string& input, int fd = 1);

/** The descriptor that `path` names by itself: 0, 1 and 2 for /dev/stdin, /dev/stdout and
 *  /dev/stderr, N for /dev/fd/N and /proc/self/fd/N (and /proc/PID/fd/N of this process); -1
 *  for any other name. */
int descriptor_named(const std::string& path);

/** True when `path` names the file that descriptor `fd` is open on (the same device and
 *  inode: /dev/stdout for fd 1, a FIFO's name for the pipe that stdin is), unless that is a
 *  character device (/dev/null, a terminal: written to by both without harm, or refused
 *  elsewhere). "" and "-" name no file. */
bool names_descriptors_file(const std::string& path, int fd);

/** True when two outputs are or will be one file: same_file, or, where either does not exist
 *  yet, the same absolute path (out.h5 and ./out.h5). "-" is the same as "-" and as a name of
 *  standard output's file (/dev/stdout, /dev/fd/1, the file it is redirected to), unless that
 *  is a character device (/dev/null takes both). */
bool same_output(const std::string& a, const std::string& b);

/** True when `a` and `b` are one name once made absolute, with `.`, `..` and symbolic links
 *  resolved as far as they exist: out.h5, ./out.h5 and a link to it, but not a hard link,
 *  whose name stays the old file's when an output is written anew and renamed over the other. */
bool same_path(const std::string& a, const std::string& b);

}  // namespace dctchop::formats
