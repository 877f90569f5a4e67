#include "dctchop/formats/file_io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/error.hpp"
#include "direct_writer.hpp"

namespace dctchop::formats {

void write_behind::advance(std::uint64_t end) noexcept {
#if defined(__linux__)
  if (fd_ < 0 || end < started_ + kick) return;
  // Off for good after any failure. Errors that say data was lost are kept; others (no
  // support, or ENOMEM and the like from a write-out that the kernel retries) are not.
  const auto stop = [this] {
    const int e = errno;
    if (e == EIO || e == ENOSPC || e == EDQUOT || e == EFBIG || e == EROFS) failed_ = e;
    fd_ = -1;
  };
  if (::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(end - started_),
                        SYNC_FILE_RANGE_WRITE) != 0) {
    stop();
    return;
  }
  started_ = end;
  if (started_ < settled_ + lag + kick) return;
  const std::uint64_t upto = started_ - lag;
  const auto off = static_cast<off_t>(settled_), len = static_cast<off_t>(upto - settled_);
  if (::sync_file_range(fd_, off, len,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
    stop();
    return;
  }
  ::posix_fadvise(fd_, off, len, POSIX_FADV_DONTNEED);
  settled_ = upto;
#else
  (void)end;
#endif
}

void flush_written(int fd, const write_behind& behind, const std::string& name) {
  if (::fsync(fd) != 0 && errno != EINVAL) throw os_error(name, "flush");
  if (const int e = behind.failure(); e != 0) {
    errno = e;
    throw os_error(name, "write");
  }
}

error os_error(const std::string& name, const char* action) {
  const int e = errno;
  return error::from_os(errc::io, name + ": cannot " + action + ": " + std::strerror(e), e);
}

// ---------------------------------------------------------------- input_file

/** The threads of a file's split reads: started as reads need them, each waiting for pieces
 *  to read, with the tool's signals blocked (start_quiet_thread), until the file is closed.
 *  Pieces must not throw. */
class input_file::read_crew {
 public:
  using piece_fn = std::function<void(std::size_t, bool)>;
  read_crew() : pid_(::getpid()) {}
  ~read_crew() {  // (never in a forked process: see input_file::close)
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  read_crew(const read_crew&) = delete;
  read_crew& operator=(const read_crew&) = delete;
  /** In a process forked from the one that made the crew (which has none of its threads). */
  bool forked() const noexcept { return ::getpid() != pid_; }

  /** piece(i, quiet) for i in [0, count): 0 on this thread (quiet: false), the others on the
   *  crew's threads (quiet: true), of which count - 1 are started where fewer are running;
   *  all here where none can be, or in a forked process. Returns when every piece is done. */
  void run(std::size_t count, const piece_fn& piece) {
    job j{&piece, count > 0 ? count - 1 : 0};
    bool crewed = false;
    // (A forked process has none of the threads it inherited.)
    if (count > 1 && !forked()) {
      std::lock_guard lock(m_);
      try {
        threads_.reserve(count - 1);  // (a running thread must not meet a failed push_back)
        while (threads_.size() < count - 1) {
          threads_.push_back(dctchop::detail::start_quiet_thread([this] { serve(); }));
#if defined(__linux__)
          // (For top and gdb, and the tests count them: named here, not by the thread itself,
          // which may not have run yet when a read it was started for is done.)
          pthread_setname_np(threads_.back().native_handle(), "dctchop-read");
#endif
        }
      } catch (...) {
        // No more threads to be had (error(io), or no memory for one): those running read
        // the pieces.
      }
      crewed = !threads_.empty();
      try {
        for (std::size_t i = 1; crewed && i < count; ++i) queue_.push_back({&j, i});
      } catch (...) {  // (no memory for the queue: none of j's pieces left in it)
        std::erase_if(queue_, [&](const task& t) { return t.j == &j; });
        crewed = false;
      }
    }
    if (!crewed) {  // no thread: every piece here
      for (std::size_t i = 0; i < count; ++i) piece(i, false);
      return;
    }
    work_.notify_all();
    piece(0, false);
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return j.left == 0; });
  }

 private:
  struct job {
    const piece_fn* piece;
    std::size_t left;  // pieces not yet read by the crew
  };
  struct task {
    job* j;
    std::size_t i;
  };
  void serve() {
    std::unique_lock lock(m_);
    for (;;) {
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped
      const task t = queue_.front();
      queue_.pop_front();
      lock.unlock();
      (*t.j->piece)(t.i, true);
      lock.lock();
      if (--t.j->left == 0) done_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable work_, done_;
  std::deque<task> queue_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
  const pid_t pid_;
};

input_file input_file::open(const std::string& path, const std::string& stdin_name) {
  input_file f;
  f.path_ = path;
  f.stdin_name_ = stdin_name;
  if (path == "-") {
    f.fd_ = STDIN_FILENO;
    f.owns_fd_ = false;
  } else {
    f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // a FIFO's open waits for a writer
    if (f.fd_ < 0) {
      if (errno == EINTR) throw error(errc::interrupted, path + ": interrupted");
      throw os_error(path, "open");
    }
    f.owns_fd_ = true;
  }
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) throw os_error(f.display_name(), "stat");
  if (S_ISDIR(st.st_mode)) throw error::from_os(errc::io, f.display_name() + ": is a directory", EISDIR);
  if (S_ISREG(st.st_mode)) {
    f.seekable_ = true;
    f.size_ = static_cast<std::uint64_t>(st.st_size);
    // stdin redirected from a file may already be partly consumed
    off_t pos = ::lseek(f.fd_, 0, SEEK_CUR);
    f.position_ = pos > 0 ? static_cast<std::uint64_t>(pos) : 0;
    if (path == "-") f.seekable_ = false;  // treat stdin as a stream either way
  }
  if (f.seekable_) f.crew_ = std::make_unique<read_crew>();
  return f;
}

input_file::input_file(input_file&& o) noexcept { *this = std::move(o); }

input_file& input_file::operator=(input_file&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    stdin_name_ = std::move(o.stdin_name_);
    fd_ = std::exchange(o.fd_, -1);
    owns_fd_ = std::exchange(o.owns_fd_, false);
    seekable_ = o.seekable_;
    size_ = o.size_;
    position_ = o.position_;
    map_ = std::exchange(o.map_, nullptr);
    check_ = std::move(o.check_);
    truncated_ = o.truncated_;
    crew_ = std::move(o.crew_);
  }
  return *this;
}

input_file::~input_file() { close(); }

void input_file::close() noexcept {
  // (No read is at work: the file is being closed.) In a process forked from the one that
  // made the crew, its threads are not there to be joined, and its condition variables count
  // them as waiters still: destroying those would wait for them forever. It is left as it is.
  if (crew_ && crew_->forked()) {
    (void)crew_.release();
  }
  crew_.reset();
  if (map_ != nullptr) ::munmap(map_, size_);
  map_ = nullptr;
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
  fd_ = -1;
  owns_fd_ = false;
}

std::string input_file::display_name() const { return path_ == "-" ? stdin_name_ : path_; }

void input_file::wait_readable() {
  for (;;) {
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 100);
    if (ready > 0) return;  // data, its end, or an error that the read reports
    // (poll() fails with EINTR for any signal, SA_RESTART or not: the check decides.)
    if (ready < 0 && errno != EINTR) return;  // a descriptor poll() cannot watch: read blocks
    check_();
  }
}

void input_file::wait_for_data() {
  if (check_) {
    wait_readable();
    return;
  }
  pollfd pfd{fd_, POLLIN, 0};
  if (::poll(&pfd, 1, -1) < 0 && errno == EINTR) {
    throw error(errc::interrupted, display_name() + ": interrupted");
  }
}

std::size_t input_file::read(void* dst, std::size_t n) {
  auto* p = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < n) {
    if (check_ && !seekable_) wait_readable();
    ssize_t r = ::read(fd_, p + done, n - done);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A descriptor that the parent left non-blocking (O_NONBLOCK belongs to the pipe's
      // open file, which the parent shares): wait for data, as a blocking read would.
      wait_for_data();
      continue;
    }
    if (r < 0) {
      // A signal handler installed without SA_RESTART asks us to stop: leave, so that the
      // callers' destructors remove any unfinished output.
      if (errno == EINTR) throw error(errc::interrupted, display_name() + ": interrupted");
      throw os_error(display_name(), "read");
    }
    if (r == 0) break;
    done += static_cast<std::size_t>(r);
  }
  position_ += done;
  return done;
}

void input_file::read_exact(void* dst, std::size_t n, const char* what) {
  std::size_t got = read(dst, n);
  if (got != n) {
    throw error(truncated_, display_name() + truncated_text() + "end of file inside " + what);
  }
}

void input_file::read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what) const {
  read_range(offset, dst, n, what, false);
}

void input_file::read_range(std::uint64_t offset, void* dst, std::size_t n, const char* what,
                            bool quiet) const {
  if (!seekable_) throw error(errc::invalid_argument, display_name() + ": positioned read on a stream");
  if (offset > size_ || n > size_ - offset) {
    throw error(truncated_, display_name() + truncated_text() + what + " lies past the end");
  }
  auto* p = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      // A signal handler installed without SA_RESTART asks us to stop: leave, so that the
      // callers' destructors remove any unfinished output. (Not on a quiet thread, which the
      // tool's signals never reach: there another handler's signal came, and the read goes on.)
      if (errno == EINTR && quiet) continue;
      if (errno == EINTR) throw error(errc::interrupted, display_name() + ": interrupted");
      throw os_error(display_name(), "read");
    }
    if (r == 0) {
      throw error(truncated_, display_name() + truncated_text() + "end of file inside " + what);
    }
    done += static_cast<std::size_t>(r);
  }
}

input_file::split_plan input_file::plan_split(std::uint64_t offset, std::size_t n,
                                              unsigned threads) noexcept {
  split_plan plan;
  plan.count = std::min<std::size_t>({std::max(threads, 1U), n / split_piece, 64});
  plan.count = std::max<std::size_t>(plan.count, 1);
  plan.bytes = n;
  plan.share = (n + plan.count - 1) / plan.count;
  plan.phase = static_cast<std::size_t>(offset % 4096);
  // (Boundaries rounded up to a page each: with shares of 2 MiB or more and at most 64 of
  // them, the last piece still holds nearly a share.)
  return plan;
}

void input_file::read_at(std::uint64_t offset, void* dst, std::size_t n, const char* what,
                         unsigned threads) const {
  const split_plan plan = plan_split(offset, n, threads);
  const std::size_t pieces = plan.count;
  // Unsplit, and the plain read's errors for a stream, a moved-from file, or bytes past the end.
  if (pieces <= 1 || !seekable_ || !crew_ || offset > size_ || n > size_ - offset) {
    return read_at(offset, dst, n, what);
  }
  auto* p = static_cast<char*>(dst);
  std::vector<std::exception_ptr> failed(pieces);
  crew_->run(pieces, [&](std::size_t i, bool quiet) {
    const std::size_t at = plan.start(i);
    try {
      read_range(offset + at, p + at, plan.start(i + 1) - at, what, quiet);
    } catch (...) {
      failed[i] = std::current_exception();
    }
  });
  for (const auto& f : failed) {
    if (f) std::rethrow_exception(f);
  }
}

bool input_file::same_file_as(int fd) const noexcept {
  struct stat a {}, b {};
  return fd_ >= 0 && ::fstat(fd_, &a) == 0 && ::fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

const std::byte* input_file::map() {
  if (map_ != nullptr) return static_cast<const std::byte*>(map_);
  if (!seekable_ || size_ == 0) return nullptr;
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) return nullptr;
  ::madvise(m, size_, MADV_SEQUENTIAL);
  map_ = m;
  return static_cast<const std::byte*>(map_);
}

// ---------------------------------------------------------------- output_file

namespace {

/** The folder of an output path ("." for a bare name). */
std::string folder_of(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

/** Throws error(io) "NAME: cannot be written: the folder nodir does not exist" when `path`'s
 *  folder is why nothing can be created there (missing, a file, under a file); returns
 *  otherwise. */
void refuse_missing_folder(const std::string& name, const std::string& path) {
  const std::string dir = folder_of(path);
  struct stat st {};
  std::string why;
  int err = ENOTDIR;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) why = dir + " is not a folder";
  } else {
    err = errno;
    if (err == ENOENT) why = "the folder " + dir + " does not exist";
    if (err == ENOTDIR) why = "the folder " + dir + " cannot exist: part of its path is a file";
  }
  if (!why.empty()) throw error::from_os(errc::io, name + ": cannot be written: " + why, err);
}

}  // namespace

std::string descriptor_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

namespace {

/** Give the unnamed (O_TMPFILE) file `fd` the name `name`; false with errno set. */
bool link_unnamed(int fd, const std::string& name) {
  const std::string self = descriptor_path(fd);
  return ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0;
}

/** An unnamed file in `path`'s folder that commit() names later, or -1 (no O_TMPFILE in this
 *  file system, no /proc): the caller then uses a named temporary file. (The link cannot be
 *  tried in advance: once linked and unlinked, Linux refuses to link the file again.) */
int open_unnamed(const std::string& path) {
#if defined(O_TMPFILE)
  if (::access("/proc/self/fd", X_OK) != 0) return -1;
  return ::open(folder_of(path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
  (void)path;
  return -1;
#endif
}

}  // namespace

bool sync_folder_of(const std::string& path) noexcept {
  const int fd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: nothing to sync there
  ::close(fd);
  return synced;
}

output_file output_file::create(const std::string& path, bool overwrite, bool direct_io,
                                const std::function<void()>& waiting) {
  output_file f;
  f.path_ = path;
  f.overwrite_ = overwrite;
  if (path == "-") {
    f.is_stdout_ = true;
    f.fd_ = STDOUT_FILENO;
    return f;
  }
  f.target_ = check_output_path(path, overwrite);
  // A file a program holds locked for writing (HDF5's lock): its later writes would go to the
  // old file, lost without a word. Once an output, where it is made.
  refuse_locked_output(f.target_, path);
  if (f.target_.descriptor >= 0) {
    f.fd_ = ::fcntl(f.target_.descriptor, F_DUPFD_CLOEXEC, 3);
    if (f.fd_ < 0) throw os_error(path, "open");
    return f;
  }
  if (f.target_.in_place) {
    // A FIFO or device: written into as it is (a FIFO waits here for its reader). With
    // `waiting`, the wait polls (a FIFO without a reader refuses a non-blocking open, ENXIO),
    // so that a caller on another thread can end it.
    const int nonblock = waiting && f.target_.fifo ? O_NONBLOCK : 0;  // (a device's ENXIO is final)
    for (;;) {
      f.fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | nonblock);
      if (f.fd_ >= 0 || errno != ENXIO || nonblock == 0) break;
      waiting();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (f.fd_ < 0) {
      if (errno == EINTR) throw error(errc::interrupted, path + ": interrupted");
      throw os_error(path, "open");
    }
    if (nonblock != 0) {  // writes block as usual once it is open
      const int flags = ::fcntl(f.fd_, F_GETFL);
      if (flags < 0 || ::fcntl(f.fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const error e = os_error(path, "open");
        ::close(std::exchange(f.fd_, -1));
        throw e;
      }
    }
    struct stat st {};
    if (::fstat(f.fd_, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
      ::close(std::exchange(f.fd_, -1));  // replaced by a file since it was checked: not in place
      throw error(errc::io, path + ": changed while being opened; try again");
    }
    if (::isatty(f.fd_) == 1) {
      ::close(std::exchange(f.fd_, -1));
      throw error(errc::invalid_argument, path + ": refusing to write binary data to a terminal");
    }
    return f;
  }
  const std::string& to = f.target_.path;
  // An unnamed file in the output's folder, given a name by commit() only: a process killed at
  // any point, even by SIGKILL, leaves nothing behind. Where that is not possible, a named
  // temporary file instead.
  int fd = open_unnamed(to);
  if (fd < 0) {
    // The temporary name is created with O_EXCL and mode 0666, so the umask applies as for any
    // new file (mkstemp would leave it 0600); replacing a file (-f), 0600, which
    // keep_mode_and_owner then makes the old file's: a replaced file of 0600 was readable by
    // others through the temporary name until then.
    const mode_t mode = f.target_.replaces ? 0600 : 0666;
    f.temp_path_ = create_temp_beside(to, [&](const std::string& candidate) {
      fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd < 0 && errno != EEXIST) refuse_temp_file(path, to);
      return fd >= 0;
    });
  }
  f.fd_ = fd;
  keep_mode_and_owner(fd, f.target_);  // from the start: a named temporary file is visible
  f.behind_ = write_behind(fd);
  if (direct_io) f.direct_ = detail::direct_writer::start(fd, path);
  return f;
}

output_target check_output_path(const std::string& path, bool overwrite, bool regular_only) {
  if (path.empty()) throw error(errc::invalid_argument, "empty output path");
  output_target t;
  t.path = path;
  struct stat st {};
  // A name of one of this process's descriptors open on a plain file (/dev/stderr, /dev/fd/3
  // of `3> out.npy`): written into through it, as stdout's names are (the shell made the
  // file, which -f would replace, leaving `3>>`'s file as it was).
  const int fd = descriptor_named(path);  // (a walk of the path's links: once)
  if (fd >= 0 && ::fcntl(fd, F_GETFD) < 0) {
    throw error::from_os(errc::io,
                         path + ": " + (fd == 0 ? std::string("standard input is closed")
                                                : "descriptor " + std::to_string(fd) +
                                                      " is not open (open it: " +
                                                      std::to_string(fd) + "> FILE)"),
                         EBADF);
  }
  if (fd >= 0 && names_descriptors_file(path, fd) && ::fstat(fd, &st) == 0 &&
      S_ISREG(st.st_mode)) {
    if (regular_only) {  // (it was "already exists", which -f would not have mended)
      throw error(errc::invalid_argument,
                  path + ": an HDF5 file is written by its name, which a descriptor's name "
                         "does not give: name the file itself");
    }
    t.in_place = true;
    t.descriptor = fd;
    return t;
  }
  if (::stat(path.c_str(), &st) != 0) {
    // A name longer than the file system takes would be refused only when the finished
    // output is named, after all the work.
    const int stat_errno = errno;
    if (stat_errno == ENAMETOOLONG) {
      throw error::from_os(errc::io, path + ": file name too long", ENAMETOOLONG);
    }
    // A symlink to nothing: writing through it would create a file elsewhere, and -f would
    // replace the link by a file; neither is what its maker meant. (A loop, or a target
    // that cannot be looked at, fails later with its own error.)
    struct stat lst {};
    if ((stat_errno == ENOENT || stat_errno == ENOTDIR) && ::lstat(path.c_str(), &lst) == 0 &&
        S_ISLNK(lst.st_mode)) {
      std::error_code ec;
      const auto to = std::filesystem::read_symlink(path, ec);
      throw error(errc::invalid_argument,
                  path + ": a symbolic link to " + (ec ? std::string("?") : to.string()) +
                      ", which is not there: remove the link, or name the file to write");
    }
    // A name that cannot be looked up (a loop of links, a folder not searchable) cannot be
    // written either.
    if (stat_errno != ENOENT) {
      if (stat_errno == ENOTDIR) refuse_missing_folder(path, path);
      throw error::from_os(errc::io, path + ": " + std::strerror(stat_errno), stat_errno);
    }
    refuse_missing_folder(path, path);  // said now, not when the output is created
    return t;
  }
  if (S_ISDIR(st.st_mode)) throw error::from_os(errc::io, path + ": is a directory", EISDIR);
  const bool special = S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode);
  if (!special && !S_ISREG(st.st_mode)) {
    throw error(errc::io, path + ": not a file, FIFO or device (a socket?)");
  }
  if (special && regular_only) {
    throw error(errc::invalid_argument,
                path + ": this output format needs a regular file (it seeks back), not a FIFO or device");
  }
  if ((!special || S_ISBLK(st.st_mode)) && !overwrite) {
    throw error(errc::output_exists, path + ": already exists (use -f to overwrite)");
  }
  if (special) {
    t.in_place = true;
    t.fifo = S_ISFIFO(st.st_mode);
    return t;
  }
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
    std::error_code ec;
    const auto real = std::filesystem::canonical(path, ec);
    if (!ec) t.path = real.string();
  }
  t.replaces = true;
  t.mode = st.st_mode & 0777;  // not set-user-ID or set-group-ID: the bytes are new
  t.uid = st.st_uid;
  t.gid = st.st_gid;
  return t;
}

void keep_mode_and_owner(int fd, const output_target& t) noexcept {
  if (!t.replaces || fd < 0) return;
  // The owner first (chown may clear mode bits), then the mode.
  struct stat now {};
  if (::fstat(fd, &now) == 0 && (now.st_uid != t.uid || now.st_gid != t.gid)) {
    (void)::fchown(fd, t.uid, t.gid);  // only root may give a file away: otherwise it stays ours
  }
  (void)::fchmod(fd, static_cast<mode_t>(t.mode));
}

void refuse_temp_file(const std::string& name, const std::string& target) {
  const int e = errno;
  refuse_missing_folder(name, target);
  if (e == ENOENT) {  // the folder is there and refuses new names: /proc, /sys
    throw error::from_os(
        errc::io, name + ": cannot be written: its folder " + folder_of(target) + " takes no new files", e);
  }
  errno = e;
  throw os_error(name, "create a temporary file beside it");
}

namespace {

/** Length of the suffix of a temporary name beside an output: "." kind (3) and 12 hex digits. */
constexpr std::size_t k_temp_suffix = 16;

/** What names the temporary files beside `path` after its "." (".NAME.tmpXXXX..."): its last
 *  part, or "dctchop" where ".NAME" and the suffix would pass the folder's own limit on names
 *  (255 on most file systems, less on some: eCryptfs about 143). */
std::string temp_stem(const std::string& path) {
  const std::string name = std::filesystem::path(path).filename().string();
  const long limit = ::pathconf(folder_of(path).c_str(), _PC_NAME_MAX);
  const std::size_t name_max = limit > 0 ? static_cast<std::size_t>(limit) : NAME_MAX;
  return 1 + name.size() + k_temp_suffix > name_max ? std::string("dctchop") : name;
}

}  // namespace

std::vector<std::string> leftover_notes(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  // The leaves to look for, by folder: "." NAME "." kind 12 hex digits, as
  // create_temp_beside makes them (".dctchop" for ".NAME" where that passes the folder's limit).
  std::vector<std::pair<fs::path, std::vector<std::pair<std::string, std::string>>>> folders;
  for (const std::string& path : paths) {
    std::error_code ec;
    const fs::path file = fs::weakly_canonical(path, ec);
    if (ec || !fs::is_regular_file(file, ec)) continue;  // (stdout, a FIFO, /dev/null)
    const std::string leaf = temp_stem(file.string());
    auto at = std::find_if(folders.begin(), folders.end(),
                           [&](const auto& f) { return f.first == file.parent_path(); });
    if (at == folders.end()) at = folders.insert(folders.end(), {file.parent_path(), {}});
    at->second.emplace_back(leaf, path);
  }
  std::vector<std::pair<std::string, std::string>> found;  // (output, leftover)
  for (const auto& [folder, leaves] : folders) {
    std::error_code ec;
    std::size_t read = 0;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end && read < 100000;
         it.increment(ec), ++read) {
      const std::string name = it->path().filename().string();
      for (const auto& [leaf, output] : leaves) {
        if (name.size() != 1 + leaf.size() + k_temp_suffix || name[0] != '.' ||
            name.compare(1, leaf.size(), leaf) != 0 || name[leaf.size() + 1] != '.') {
          continue;
        }
        const std::string kind = name.substr(leaf.size() + 2, 3);
        if ((kind != "tmp" && kind != "old") ||
            name.find_first_not_of("0123456789abcdef", leaf.size() + 5) != std::string::npos) {
          continue;
        }
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
        found.emplace_back(output, name);
        break;  // (one output's: the same name for another would be the same leftover)
      }
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> notes;
  for (const auto& [output, name] : found) {
    const bool old = name.compare(name.size() - 15, 3, "old") == 0;
    const bool shared = name.rfind(".dctchop.", 0) == 0;
    notes.push_back(
        output + ": " + name + " beside it " +
        (shared ? "(of an output with a long name in this folder) " : "") +
        (old ? "is a file that an earlier decompress -f --labels-out replaced, kept there when "
               "that run was stopped (SIGKILL), or another run's, still at work: then its only "
               "copy, to rename back or remove"
             : "was left by an earlier run that was stopped (SIGKILL), or is another run's, "
               "still writing: remove it once no dctchop writes " + output));
  }
  return notes;
}

void refuse_locked_output(const output_target& t, const std::string& name) {
  if (!t.replaces) return;
  const int probe = ::open(t.path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (probe < 0) return;
  const bool held = ::flock(probe, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(probe);  // (and with it the lock, where it was taken)
  if (held) {
    throw error::from_os(errc::io,
                         name + ": a program holds it locked for writing (an exclusive flock, "
                                "which HDF5 takes on a file it writes): replaced, what it "
                                "writes next would be lost; replace it once that program has "
                                "closed it",
                         EWOULDBLOCK);
  }
}

std::string create_temp_beside(const std::string& path,
                               const std::function<bool(const std::string&)>& try_create,
                               const char* kind) {
  // Same folder as the output, so that rename() is atomic. Built with append: GCC 12 warns
  // falsely on "." + std::string&& (-Wrestrict).
  const std::string dir = folder_of(path);
  // ".NAME.tmp..." where that fits a name, else ".dctchop.tmp...": a long output name (240
  // bytes and more) must not make its temporary name too long.
  const std::string stem = temp_stem(path);
  std::random_device rd;
  std::mt19937_64 rng((static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<std::uint64_t>(::getpid()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, ".%.3s%012llx", kind,
                  static_cast<unsigned long long>(rng() & 0xffffffffffffull));
    std::string leaf(".");
    leaf.append(stem).append(suffix);
    const std::string temp = (std::filesystem::path(dir) / leaf).string();
    if (try_create(temp)) return temp;
  }
  // try_create (HDF5's, say) may not say why; the folder usually does.
  refuse_missing_folder(path, path);
  const bool writable = ::access(dir.c_str(), W_OK) == 0;
  const int e = writable ? 0 : errno;
  throw error::from_os(errc::io, path + ": cannot create a temporary file beside it" +
                                     (writable ? std::string() : std::string(": ") + std::strerror(e)),
                       e);
}

output_file::output_file(output_file&& o) noexcept { *this = std::move(o); }

output_file& output_file::operator=(output_file&& o) noexcept {
  if (this != &o) {
    abandon();
    path_ = std::move(o.path_);
    target_ = std::move(o.target_);
    temp_path_ = std::move(o.temp_path_);
    fd_ = std::exchange(o.fd_, -1);
    is_stdout_ = o.is_stdout_;
    overwrite_ = o.overwrite_;
    committed_ = std::exchange(o.committed_, true);
    sync_folder_ = o.sync_folder_;
    resync_fd_ = std::exchange(o.resync_fd_, -1);
    flushed_ = o.flushed_;
    position_ = o.position_;
    behind_ = o.behind_;
    direct_ = std::move(o.direct_);
    check_ = std::move(o.check_);
    watched_ = std::exchange(o.watched_, watched::no);
    nb_fd_ = std::exchange(o.nb_fd_, -1);
  }
  return *this;
}

output_file::~output_file() { abandon(); }

void output_file::abandon() noexcept {
  direct_.reset();  // stops the flusher before the descriptor closes
  unwatch();
  if (fd_ >= 0 && !is_stdout_) {
    ::close(fd_);
    if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  }
  fd_ = -1;
  temp_path_.clear();
  if (resync_fd_ >= 0) ::close(std::exchange(resync_fd_, -1));
}

std::string output_file::display_name() const { return is_stdout_ ? "<stdout>" : path_; }

void output_file::unwatch() noexcept {
  if (nb_fd_ >= 0) ::close(std::exchange(nb_fd_, -1));
  watched_ = watched::no;
}

void output_file::watch(std::function<void()> check) {
  check_ = std::move(check);
  unwatch();
  struct stat st{};
  if (!check_ || fd_ < 0 || direct_ || ::fstat(fd_, &st) != 0) return;
  if (S_ISSOCK(st.st_mode)) {
    watched_ = watched::socket;
  } else if (S_ISFIFO(st.st_mode)) {
    watched_ = watched::pipe;
    // Linux opens a pipe's /proc/self/fd entry as a new description of the same pipe.
    const std::string self = descriptor_path(fd_);
    nb_fd_ = ::open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  }
}

void output_file::write_watched(const char* p, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    pollfd pfd{fd_, POLLOUT, 0};
    // (poll() fails with EINTR for any signal, SA_RESTART or not: the check decides.)
    const int ready = ::poll(&pfd, 1, 100);
    if (ready < 0 && errno != EINTR) throw os_error(display_name(), "wait to write");
    if (ready <= 0) {  // no room yet, or a signal: ask whether to go on
      check_();
      continue;
    }
    // (POLLERR or POLLHUP: the reader is gone, and the write says so, EPIPE.)
    ssize_t w = 0;
    if (watched_ == watched::socket) {
      w = ::send(fd_, p + done, n - done, MSG_DONTWAIT);
    } else if (nb_fd_ >= 0) {
      w = ::write(nb_fd_, p + done, n - done);
    } else {  // room for PIPE_BUF bytes at least: a write of that much does not block
      w = ::write(fd_, p + done, std::min<std::size_t>(n - done, PIPE_BUF));
    }
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) continue;
      if (errno == EINTR) {
        check_();
        continue;
      }
      throw os_error(display_name(), "write");
    }
    done += static_cast<std::size_t>(w);
  }
}

void output_file::write_fd(const void* src, std::size_t n) {
  const auto* p = static_cast<const char*>(src);
  if (watched_ != watched::no) {
    write_watched(p, n);
    return;
  }
  std::size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd_, p + done, n - done);
    if (w < 0) {
      // A signal handler installed without SA_RESTART asks us to stop: leave, so that the
      // callers' destructors remove any unfinished output.
      if (errno == EINTR) throw error(errc::interrupted, display_name() + ": interrupted");
      throw os_error(display_name(), "write");
    }
    done += static_cast<std::size_t>(w);
  }
}

void output_file::write(const void* src, std::size_t n) {
  if (fd_ < 0) {
    throw error(errc::invalid_argument,
                (path_.empty() ? std::string("an output moved from, or never made")
                               : display_name()) + ": write after close");
  }
  if (direct_) {
    direct_->append(src, n);
  } else {
    write_fd(src, n);
    behind_.advance(position_ + n);
  }
  position_ += n;
}

void output_file::write_zeros(std::size_t n) {
  static const char zeros[4096] = {};
  while (n > 0) {
    std::size_t k = n < sizeof zeros ? n : sizeof zeros;
    write(zeros, k);
    n -= k;
  }
}

void output_file::commit() {
  if (committed_) return;
  unwatch();  // our own description of a watched pipe: closed now, or its reader waits for it
  if (is_stdout_) {
    committed_ = true;
    return;
  }
  if (target_.in_place) {  // a FIFO or device: nothing to name
    const int fd = std::exchange(fd_, -1);
    // A block device holds what was written in the page cache, as a file does: flushed here,
    // and its failure is the output's (a FIFO or character device answers EINVAL).
    if (::fsync(fd) != 0 && errno != EINVAL) {
      const error e = os_error(display_name(), "flush");
      ::close(fd);
      throw e;
    }
    if (::close(fd) != 0) throw os_error(display_name(), "close");
    committed_ = true;
    return;
  }
  flush_to_disk();
  if (temp_path_.empty()) {
    name_anonymous();  // an O_TMPFILE: sets temp_path_, or links at the path
    // Linked: the folder is synced so that the name lasts as the data does. Where it cannot
    // be (a write-only drop box, 0733, is not this user's to open), the file is synced once
    // more, which journaling file systems (ext4, XFS) commit together with its new name.
    if (temp_path_.empty() && sync_folder_ && !sync_folder_of(target_.path)) (void)::fsync(fd_);
  }
  // A second descriptor outlives the close, whose failure (NFS reports late write errors
  // there) must come before the rename: it syncs the file again after a rename into a
  // folder that cannot be synced, as above.
  struct closing {
    int fd;
    ~closing() {
      if (fd >= 0) ::close(fd);
    }
  } const resync{temp_path_.empty() || !sync_folder_ ? -1 : ::fcntl(fd_, F_DUPFD_CLOEXEC, 0)};
  // Deferred, the folder's sync (or the file's second one) comes in sync_folder(), which
  // keeps the second descriptor till then.
  if (!sync_folder_) resync_fd_ = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (::close(fd_) != 0) {
    const error e = os_error(display_name(), "close");  // before unlink() sets errno
    fd_ = -1;
    ::unlink(temp_path_.empty() ? target_.path.c_str() : temp_path_.c_str());
    throw e;
  }
  fd_ = -1;
  if (!temp_path_.empty()) {
    publish_temp(-1, temp_path_, target_.path, display_name(), overwrite_, resync.fd,
                 sync_folder_);
  }
  committed_ = true;
  temp_path_.clear();
}

void output_file::sync_folder() noexcept {
  if (committed_ && !is_stdout_ && !target_.in_place && !sync_folder_of(target_.path) &&
      resync_fd_ >= 0) {
    (void)::fsync(resync_fd_);
  }
  if (resync_fd_ >= 0) ::close(std::exchange(resync_fd_, -1));
}

void output_file::withdraw() noexcept {
  if (committed_ && !is_stdout_ && !target_.in_place && !target_.replaces) {
    ::unlink(target_.path.c_str());
    sync_folder_of(target_.path);  // gone for good, as its name was there for good
  }
}

void output_file::flush_to_disk() {
  if (flushed_ || committed_ || is_stdout_ || target_.in_place || fd_ < 0) return;
  if (direct_) {
    direct_->finish();
    direct_.reset();
  }
  flush_written(fd_, behind_, display_name());
  flushed_ = true;
}

namespace {

/** rename(temp, path) that never replaces a file that appeared at `path` (without -f): false
 *  with errno EEXIST when one is there, or another errno. RENAME_NOREPLACE where the file
 *  system has it; else link() and unlink() (NFS); else, where there are no hard links either
 *  (vfat, exFAT), a plain rename after checking that nothing is there (a small race, as
 *  before 2026-12-02 everywhere). */
bool rename_no_replace(const std::string& temp, const std::string& path) {
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return false;  // EEXIST, ...
  if (::link(temp.c_str(), path.c_str()) == 0) {
    ::unlink(temp.c_str());
    return true;
  }
  struct stat a {}, b {};
  if (errno == EEXIST) {
    // NFS may answer a retransmitted LINK that did succeed with EEXIST: the same file is fine.
    if (::stat(temp.c_str(), &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      ::unlink(temp.c_str());
      return true;
    }
    errno = EEXIST;
    return false;
  }
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS && errno != EMLINK) return false;
  if (::lstat(path.c_str(), &b) == 0) {
    errno = EEXIST;
    return false;
  }
  return ::rename(temp.c_str(), path.c_str()) == 0;
}

}  // namespace

void publish_temp(int fd, const std::string& temp, const std::string& path,
                  const std::string& display_name, bool overwrite, int resync_fd,
                  bool sync_folder) {
  // EINVAL: a descriptor that cannot be synced (a pipe, some special files), nothing to flush.
  const char* failed = nullptr;
  if (fd >= 0 && ::fsync(fd) != 0 && errno != EINVAL) {
    failed = "flush";
  } else if (!overwrite) {
    if (!rename_no_replace(temp, path)) {
      const int e = errno;
      ::unlink(temp.c_str());
      if (e == EEXIST) {
        throw error(errc::output_exists, display_name + ": already exists (use -f to overwrite)");
      }
      errno = e;
      throw os_error(display_name, "put the finished output in its place");
    }
  } else if (::rename(temp.c_str(), path.c_str()) != 0) {
    failed = "put the finished output in its place";
  }
  if (failed != nullptr) {
    const int e = errno;
    ::unlink(temp.c_str());
    errno = e;
    throw os_error(display_name, failed);
  }
  if (sync_folder && !sync_folder_of(path) && resync_fd >= 0) (void)::fsync(resync_fd);
}

void output_file::name_anonymous() {
  // Straight to the path when nothing is there: link() never replaces a file, so without -f
  // one that appeared since create() is refused rather than overwritten.
  if (link_unnamed(fd_, target_.path)) return;
  if (errno != EEXIST) {
    throw os_error(display_name(), "link the finished output into its folder");
  }
  if (!overwrite_) {
    throw error(errc::output_exists, path_ + ": already exists (use -f to overwrite)");
  }
  // Replacing a file: a name beside it, then rename() over it, which is atomic.
  temp_path_ = create_temp_beside(target_.path, [&](const std::string& candidate) {
    if (link_unnamed(fd_, candidate)) return true;
    if (errno != EEXIST) {
      throw os_error(display_name(), "link the finished output beside the file it replaces");
    }
    return false;
  });
}

bool reads_as_stream(const std::string& path) {
  if (path == "-") return true;
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

kept_original::kept_original(const std::string& path) {
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  std::error_code ec;
  const auto real = std::filesystem::canonical(path, ec);  // the file a symlink names
  if (ec) return;
  target_ = real.string();
  // In a sticky folder another user's file can be linked but the link not removed again (nor
  // the file replaced): keep nothing there.
  struct stat dir {};
  const std::string folder = folder_of(target_);
  if (::geteuid() != 0 && ::stat(folder.c_str(), &dir) == 0 && (dir.st_mode & S_ISVTX) != 0 &&
      st.st_uid != ::geteuid() && dir.st_uid != ::geteuid()) {
    return;
  }
  bool linked = false;
  try {
    kept_ = create_temp_beside(target_, [&](const std::string& candidate) {
      if (::link(target_.c_str(), candidate.c_str()) == 0) return linked = true;
      return errno != EEXIST;  // (not taken: no link here, nothing to keep)
    }, "old");
  } catch (const error&) {
  }
  if (!linked) kept_.clear();
}

kept_original::~kept_original() {
  if (!kept_.empty()) ::unlink(kept_.c_str());
}

bool kept_original::restore() noexcept {
  if (kept_.empty() || ::rename(kept_.c_str(), target_.c_str()) != 0) return false;
  kept_.clear();
  sync_folder_of(target_);  // back for good, as the new file's name was there for good
  return true;
}

bool refused_fifo(const std::string& path) {
  struct stat st {};
  if (path == "-" || ::stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
  return true;
}

bool same_file(const std::string& a, const std::string& b) {
  // "-" as an input is standard input: the same file as `b` when redirected from it.
  const auto stat_of = [](const std::string& p, struct stat& st) {
    return p == "-" ? ::fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode)
                    : ::stat(p.c_str(), &st) == 0;
  };
  if (b == "-") return false;
  struct stat sa {}, sb {};
  if (!stat_of(a, sa) || !stat_of(b, sb)) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool is_standard_output(const std::string& input, int fd) {
  struct stat out {}, in {};
  if (::fstat(fd, &out) != 0 || !S_ISREG(out.st_mode)) return false;
  const bool ok = input == "-" ? ::fstat(STDIN_FILENO, &in) == 0 : ::stat(input.c_str(), &in) == 0;
  return ok && S_ISREG(in.st_mode) && in.st_dev == out.st_dev && in.st_ino == out.st_ino;
}

namespace {
/** N where `p` (symbolic links resolved) is /proc/PID/fd/N or /proc/PID/task/TID/fd/N of
 *  this process, `self` being "/proc/PID/"; -1 otherwise. */
int proc_fd_number(const std::string& p, const std::string& self) {
  if (p.compare(0, self.size(), self) != 0) return -1;
  std::string_view rest(p);
  rest.remove_prefix(self.size());
  if (rest.substr(0, 5) == "task/") {  // (/proc/thread-self: /proc/PID/task/TID)
    rest.remove_prefix(5);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) return -1;
    rest.remove_prefix(slash + 1);
  }
  if (rest.substr(0, 3) != "fd/") return -1;
  rest.remove_prefix(3);
  int n = -1;
  const auto [at, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  return ec == std::errc() && at == rest.data() + rest.size() && !rest.empty() ? n : -1;
}
}  // namespace

int descriptor_named(const std::string& path) {
  if (path == "/dev/stdin") return STDIN_FILENO;
  if (path == "/dev/stdout") return STDOUT_FILENO;
  if (path == "/dev/stderr") return STDERR_FILENO;
  // Any other spelling (/dev/./fd/3, /proc/thread-self/fd/3, a symbolic link to /dev/fd/3):
  // its links followed a component at a time, up to the descriptor's own (magic) link, which
  // is not followed (it names the file the descriptor is open on, or nothing when closed).
  namespace fs = std::filesystem;
  if (path.empty() || path == "-") return -1;
  std::error_code ec;
  fs::path todo = fs::absolute(path, ec);
  if (ec) return -1;
  const std::string self = "/proc/" + std::to_string(::getpid()) + "/";
  for (int hops = 0; hops < 40; ++hops) {
    fs::path at = "/";
    bool followed = false;
    for (auto it = std::next(todo.begin()); it != todo.end(); ++it) {
      const std::string part = it->string();
      if (part.empty() || part == ".") continue;
      at = part == ".." ? at.parent_path() : at / part;
      const bool last = std::next(it) == todo.end();
      if (const int n = proc_fd_number(at.string(), self); n >= 0) return last ? n : -1;
      struct stat st {};
      if (::lstat(at.c_str(), &st) != 0) return -1;
      if (!S_ISLNK(st.st_mode)) continue;
      const fs::path target = fs::read_symlink(at, ec);
      if (ec) return -1;
      fs::path next = target.is_absolute() ? target : at.parent_path() / target;
      for (auto rest = std::next(it); rest != todo.end(); ++rest) next /= *rest;
      todo = next;
      followed = true;
      break;
    }
    if (!followed) return -1;
  }
  return -1;
}

bool names_descriptors_file(const std::string& path, int fd) {
  struct stat open {}, named {};
  return !path.empty() && path != "-" && ::fstat(fd, &open) == 0 &&
         ::stat(path.c_str(), &named) == 0 && !S_ISCHR(named.st_mode) &&
         open.st_dev == named.st_dev && open.st_ino == named.st_ino;
}

bool same_output(const std::string& a, const std::string& b) {
  if (a == "-" || b == "-") {
    if (a == b) return true;
    // "-" and a name of standard output's own file: /dev/stdout, /dev/fd/1, or the file that
    // stdout is redirected to (two outputs into one, the second replacing the first).
    return names_descriptors_file(a == "-" ? b : a, STDOUT_FILENO);
  }
  return same_file(a, b) || same_path(a, b);
}

bool same_path(const std::string& a, const std::string& b) {
  const auto absolute = [](const std::string& p) {
    std::error_code ec;
    const auto full = std::filesystem::absolute(p, ec);
    if (ec) return p;
    const auto c = std::filesystem::weakly_canonical(full, ec);  // (a name that does not exist
    return ec ? full.string() : c.string();                      //  yet stays as it is)
  };
  return absolute(a) == absolute(b);
}

}  // namespace dctchop::formats
