// The Python binding (pybind11, NumPy): `import dctchop`. Archives read as numpy arrays, and the
// training loader (dctchop/loader.hpp) as a Python iterator. Errors become dctchop.Error (a
// RuntimeError) whose `kind` is the error's code name; bad arguments and values are also
// ValueErrors, and I/O failures OSErrors, so that the usual `except` clauses catch them.
#include <dlpack/dlpack.h>
#ifdef __GLIBCXX__
#include <cxxabi.h>
#endif
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/cores.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop/device_loader.hpp"
#include "dctchop/loader.hpp"
#include "dctchop/matrix_form.hpp"
#include "dctchop_version.hpp"

namespace py = pybind11;
using namespace dctchop;
using u64 = std::uint64_t;

namespace {

/** NumPy's name of a codec dtype. */
py::dtype numpy_dtype(dtype t) {
  switch (t) {
    case dtype::u8: return py::dtype("u1");
    case dtype::u16: return py::dtype("<u2");
    case dtype::i16: return py::dtype("<i2");
    case dtype::f32: return py::dtype("<f4");
    case dtype::f64: return py::dtype("<f8");
    case dtype::f16: return py::dtype("<f2");
    case dtype::i8: return py::dtype("i1");
    case dtype::i32: return py::dtype("<i4");
    case dtype::u32: return py::dtype("<u4");
  }
  throw error(errc::internal, "unknown dtype");
}

/** The shape of `n` items of shape `item`: (n, *item). */
std::vector<py::ssize_t> batch_shape(u64 n, const std::vector<u64>& item) {
  std::vector<py::ssize_t> out{static_cast<py::ssize_t>(n)};
  for (const u64 d : item) out.push_back(static_cast<py::ssize_t>(d));
  return out;
}

template <typename Bytes>
py::array array_of(Bytes&& bytes, py::dtype dt, std::vector<py::ssize_t> shape) {
  // The array takes the bytes over (no copy): a capsule owns them and frees them with it.
  using owned_t = std::remove_cvref_t<Bytes>;
  static_assert(!std::is_lvalue_reference_v<Bytes>, "array_of takes the bytes over");
  auto* owned = new owned_t(std::move(bytes));
  py::capsule owner(owned, [](void* v) { delete static_cast<owned_t*>(v); });
  return py::array(dt, std::move(shape), {}, owned->data(), owner);
}

/** A batch's label bytes as an array in the labels' own dtype, (n, *label shape); None when
 *  the archive has no labels. */
py::object labels_of(std::vector<std::byte>&& bytes, const std::string& descr,
                     const std::vector<u64>& shape, u64 n) {
  if (descr.empty()) return py::none();  // no labels (zero-width ones are an empty array)
  return array_of(std::move(bytes), py::dtype(descr), batch_shape(n, shape));
}

/** Parks the calling thread for good (the process is ending and will take it along): what
 *  Python 3.14 does to a thread that wants the GIL back while the interpreter shuts down. */
[[noreturn]] void park_thread() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

/** Runs `fn`, which calls Python code (the GIL held), and returns what it returns. Python
 *  before 3.14 ends a daemon thread that wants the GIL back while the interpreter shuts down
 *  with pthread_exit, whose unwinding must not reach the frames above: pybind11's hold Python
 *  objects, and releasing them without the GIL races with the shutdown's collector (a crash
 *  in one run of two). So such a thread runs `before_parking` (without the GIL: it must not
 *  touch Python) and is parked instead, as Python 3.14 makes it do. `fn` must
 *  itself hold no reference that unwinding would release. */
template <typename Fn>
decltype(auto) calling_python(Fn&& fn, const std::function<void()>& before_parking) {
#ifdef __GLIBCXX__
  try {
    return fn();
  } catch (abi::__forced_unwind&) {
    if (before_parking) before_parking();
    park_thread();
  }
#else
  return fn();
#endif
}

/** A message as a Python str: a file name in it need not be UTF-8 (a Latin-1 name on Linux),
 *  and its stray bytes read as \xe9, not as a UnicodeDecodeError raised in place of the
 *  error that carries the message. */
py::object message_text(const std::string& message) {
  // One line, as the command prints it: a control character of a name (a newline in a path)
  // escaped, as a byte that is not UTF-8 is (\xe9).
  std::string line;
  line.reserve(message.size());
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      line += c;
    } else if (c == '\n' || c == '\t' || c == '\r') {
      line += c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", u);
      line += esc;
    }
  }
  py::object text = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
      line.data(), static_cast<py::ssize_t>(line.size()), "backslashreplace"));
  if (!text) throw py::error_already_set();
  return text;
}

/** Raises dctchop.SampleIndexError (an IndexError and a dctchop.Error of kind
 *  'out_of_range') with `message`. */
[[noreturn]] void raise_sample_index_error(const std::string& message) {
  py::object cls = py::module_::import("dctchop._dctchop").attr("SampleIndexError");
  py::object e = cls(message_text(message));
  e.attr("kind") = "out_of_range";
  PyErr_SetObject(cls.ptr(), e.ptr());
  throw py::error_already_set();
}

/** The GIL released for a scope, as py::gil_scoped_release, but safe at interpreter exit: a
 *  daemon thread that takes the GIL back as Python shuts down (or waits for it when the
 *  shutdown begins) was ended by pthread_exit out of gil_scoped_release's destructor, which
 *  aborts the process ("terminate called without an active exception", exit 134) instead of
 *  the clean exit the script made. Here it runs `before_parking` and is parked (calling_python). The
 *  thread that shuts Python down (a __del__ or a generator's close at exit) takes the GIL
 *  back as always: Python ends only the others. */
class gil_released {
 public:
  explicit gil_released(std::function<void()> before_parking = {})
      : before_parking_(std::move(before_parking)), state_(PyEval_SaveThread()) {}
  ~gil_released() { calling_python([this] { PyEval_RestoreThread(state_); }, before_parking_); }
  gil_released(const gil_released&) = delete;
  gil_released& operator=(const gil_released&) = delete;

 private:
  std::function<void()> before_parking_;
  PyThreadState* state_;
};

/** The fork()s between the process that made an object and this one: a child's fork handler
 *  adds one. `renewing` guards the renewal of a lock in a child, and is itself made anew
 *  there. */
std::atomic<u64> fork_generation{0};
pthread_mutex_t renewing = PTHREAD_MUTEX_INITIALIZER;

/** Before fork(): the forking thread's OpenMP pool ended (release_thread_pool), so that the
 *  child's OpenMP work (PyTorch's, in a multiprocessing worker forked after Archive decoded
 *  on several threads) does not wait forever for threads only the parent has. */
void before_fork() noexcept { release_thread_pool(); }

void after_fork_in_child() noexcept {
  renewing = PTHREAD_MUTEX_INITIALIZER;  // a thread of the parent may have held it
  fork_generation.fetch_add(1);
}

/** The lock of an object that a fork()ed child may go on using (a DataLoader worker): fork
 *  copies a lock that another thread of the parent held (a read in progress, without the GIL)
 *  as held, by a thread that the child does not have, and the child's first call waited for
 *  it for good. In a child the first use takes a fresh lock (the parent's copy is left as it
 *  is, as the C++ loader leaves its own). BasicLockable, for std::lock_guard. */
class fork_safe_mutex {
 public:
  void lock() { current().lock(); }
  void unlock() { m_->unlock(); }  // (renewed only while no thread of this process holds it)

 private:
  std::mutex& current() {
    const u64 g = fork_generation.load(std::memory_order_acquire);
    if (generation_.load(std::memory_order_acquire) != g) {
      ::pthread_mutex_lock(&renewing);  // (no exception while it is held)
      if (generation_.load(std::memory_order_relaxed) != g) {
        if (auto* fresh = new (std::nothrow) std::mutex) {
          (void)m_.release();  // maybe held, by a thread of the parent: left alone
          m_.reset(fresh);
          generation_.store(g, std::memory_order_release);
        }
      }
      ::pthread_mutex_unlock(&renewing);
      if (generation_.load(std::memory_order_acquire) != g) throw std::bad_alloc();
    }
    return *m_;
  }
  std::unique_ptr<std::mutex> m_ = std::make_unique<std::mutex>();
  std::atomic<u64> generation_{fork_generation.load()};
};

/** Runs `work` (which must not touch Python objects) on a thread of its own, handing it a
 *  progress function for the library to call after each chunk. Meanwhile this thread, which
 *  holds the GIL only between waits of at most 50 ms, checks for signals (Ctrl-C raises
 *  KeyboardInterrupt here) and passes the latest (done, total) to `progress`, a Python
 *  callable or None. A Python exception from either cancels the work at its next chunk: the
 *  library then throws, its unfinished outputs are removed, and the Python exception
 *  propagates once the work has stopped.
 *
 *  All or nothing: when the last chunk is written (done == total) the work waits for one more
 *  check here before it finishes its outputs, so that an exception raised until then leaves
 *  no output. A signal after that check is left pending, for Python to raise once the call
 *  has returned, as for any call that ends as the signal comes. */
template <typename Result, typename Work>
Result run_interruptible(Work&& work, const py::object& progress) {
  struct shared {
    std::mutex m;
    std::condition_variable cv;
    bool finished = false;
    bool last_written = false;  // the work waits at its last chunk ...
    bool last_checked = false;  // ... until this thread has checked once more
    std::atomic<bool> cancel{false};
    std::atomic<u64> done{0}, total{0};
    std::exception_ptr failure;
  } s;
  Result result{};
  const formats::progress_fn report = [&s](u64 done, u64 total) {
    if (total == 0) {  // (0, 0): only a chance to cancel, from the reading thread
      if (s.cancel.load()) throw error(errc::interrupted, "interrupted");
      return;
    }
    s.total.store(total);
    s.done.store(done);
    if (done == total && !s.cancel.load()) {
      std::unique_lock lock(s.m);
      s.last_written = true;
      s.cv.notify_all();
      s.cv.wait(lock, [&] { return s.last_checked || s.cancel.load(); });
      s.last_written = s.last_checked = false;  // (a target search writes again)
    }
    if (s.cancel.load()) throw error(errc::interrupted, "interrupted");
  };
  std::thread t;
  // Cancel the work and wait for it; touches no Python object, so it may run without the GIL.
  const auto cancel_and_join = [&] {
    {
      std::lock_guard lock(s.m);
      s.cancel.store(true);
      s.cv.notify_all();
    }
    if (t.joinable()) t.join();
  };
  {
    gil_released release(cancel_and_join);
    t = std::thread([&] {
      try {
        result = work(report);
      } catch (...) {
        s.failure = std::current_exception();
      }
      std::lock_guard lock(s.m);
      s.finished = true;
      s.cv.notify_all();
    });
  }
  auto stop = [&] {
    gil_released release;
    cancel_and_join();
  };
  std::optional<py::error_already_set> raised;
  try {
    u64 reported = 0;
    bool committing = false;  // past the last chunk's check: signals wait for the return
    for (;;) {
      bool finished = false, last = false;
      {
        gil_released release(cancel_and_join);
        std::unique_lock lock(s.m);
        s.cv.wait_for(lock, std::chrono::milliseconds(50),
                      [&] { return s.finished || (s.last_written && !s.last_checked); });
        finished = s.finished;
        last = s.last_written && !s.last_checked;
      }
      if (finished) break;  // (failed, or made no progress call: nothing left to check)
      const u64 done = s.done.load();
      if (committing && done != s.total.load()) committing = false;  // writing again
      try {
        calling_python(
            [&] {
              if (!committing && PyErr_CheckSignals() != 0) throw py::error_already_set();
              if (!progress.is_none() && done != reported) {
                reported = done;
                // The C API, so that no frame between here and Python holds a reference.
                using ull = unsigned long long;
                PyObject* r = PyObject_CallFunction(progress.ptr(), "KK", static_cast<ull>(done),
                                                    static_cast<ull>(s.total.load()));
                if (r == nullptr) throw py::error_already_set();
                Py_DECREF(r);
              }
            },
            cancel_and_join);
      } catch (py::error_already_set& e) {
        raised = std::move(e);
        break;
      }
      if (last) {  // checked: the work finishes its outputs, no longer to be cancelled
        std::lock_guard lock(s.m);
        s.last_checked = true;
        s.cv.notify_all();
        committing = true;
      }
    }
  }
  catch (...) {
    stop();  // an error of this thread's own (memory): the work must not outlive the call
    throw;
  }
  if (raised) {
    stop();
    throw std::move(*raised);  // the caller's exception wins over the work's
  }
  {
    gil_released release;
    t.join();
  }
  if (s.failure) std::rethrow_exception(s.failure);
  return result;
}

/** An archive opened for random access. The header stays readable after close(). */
class archive {
 public:
  archive(const std::string& path, int threads)
      : path_(path), r_(formats::archive_reader::open_seekable(path)), h_(r_->header()) {
    if (!r_->random_access()) throw error(errc::invalid_argument, path + ": not a seekable file");
    // (CPU backends hold no locks, and a forked child decodes on one thread: they go on there.)
    be_ = make_backend(backend_kind::cpu, {threads});
    be_serial_ = be_->threads() == 1 ? nullptr : make_backend(backend_kind::cpu, {1});
  }
  /** A closed archive of `header_json` (header_json() of one): what a closed Archive's copy
   *  is, without its file, which may be gone. */
  archive(const std::string& path, const std::string& header_json)
      : path_(path), h_(formats::parse_archive_header(header_json, path)) {
    closed_.store(true);
  }
  std::string header_json() const { return formats::json_text(h_.to_json()); }
  /** What tells this archive from another file put in its place since (its header and the
   *  digest of its index, which holds every chunk's checksum): a pickled Archive compares it
   *  where it is opened again by its name. Empty for a closed archive's copy. */
  std::string identity() const {
    if (!r_) return {};
    std::string id = header_json();  // (appended: GCC 12 warns falsely on s + "\n" + ...)
    return id.append("\n").append(std::to_string(r_->footer_digest()));
  }
  const std::string& path() const { return path_; }
  u64 samples() const { return h_.geom.samples; }
  py::tuple shape() const { return py::cast(h_.geom.shape()); }
  py::dtype type() const { return numpy_dtype(h_.type); }
  int block() const { return h_.codec.block; }
  int chop() const { return h_.codec.chop; }
  std::string coeff() const { return std::string(to_string(h_.codec.coeff)); }
  std::string layout_name() const { return std::string(to_string(h_.geom.lay)); }
  double offset() const { return h_.codec.offset; }
  u64 planes() const { return h_.geom.planes; }
  u64 height() const { return h_.geom.height; }
  u64 width() const { return h_.geom.width; }
  bool closed() const { return closed_.load(); }
  /** Release the file; reading afterwards raises ValueError. */
  void close() {
    gil_released release;  // (a read in another thread holds the lock without the GIL)
    std::lock_guard lock(m_);
    closed_.store(true);
    r_.reset();
  }

  // Reads and decodes run without the GIL, so that other Python threads go on meanwhile;
  // m_ keeps them one at a time on this archive, and close() out of their way.

  /** Samples [first, first + count), decoded: shape (count, *sample shape). */
  py::array read(long long first, long long count) {
    const auto& h = h_;
    check_range(first, count);
    py::array a(numpy_dtype(h.type), batch_shape(count, h.geom.sample_shape()));
    void* dst = a.mutable_data();
    {
      gil_released release;
      std::lock_guard lock(m_);
      const auto coeffs = read_coefficient_bytes(first, count);
      // A few samples on this thread: waking a team of threads takes longer than decoding
      // them (one 28x28 sample, as a Dataset reads: 12 us here, 24..400 us on every core).
      const bool small = u64(count) * h.geom.values_per_sample() < (u64(1) << 15);
      backend& be = small && be_serial_ ? *be_serial_ : *be_;
      be.decode(h.codec, coeffs, make_view(h.geom, h.type, dst, count));
    }
    return a;
  }

  /** Samples [first, first + count) as stored: their coefficient bytes, (count, bytes per
   *  sample) of uint8, as a Loader with decode=False hands them out. */
  py::array read_coefficients(long long first, long long count) {
    check_range(first, count);
    std::vector<std::byte> bytes;
    {
      gil_released release;
      std::lock_guard lock(m_);
      bytes = read_coefficient_bytes(first, count);
    }
    return array_of(std::move(bytes), py::dtype("u1"),
                    {static_cast<py::ssize_t>(count),
                     static_cast<py::ssize_t>(h_.coeff_bytes_per_sample())});
  }

  /** The labels side array, or None. */
  py::object labels() {
    std::optional<std::vector<std::byte>> bytes;
    std::string descr;
    std::vector<py::ssize_t> shape;
    {
      gil_released release;
      std::lock_guard lock(m_);
      auto& r = open_reader();
      const auto* info = r.find_side_array("labels");
      if (info != nullptr) {
        bytes = r.read_side_array("labels");
        descr = info->descr;
        shape.assign(info->shape.begin(), info->shape.end());
      }
    }
    if (!bytes) return py::none();
    return array_of(std::move(*bytes), py::dtype(descr), std::move(shape));
  }

  /** Labels of samples [first, first + count), (count, *label shape), or None without
   *  labels. The array is checked against its checksum at the first call, in pieces, and
   *  only the rows asked for are read: labels may be as large as the data (masks). */
  py::object read_labels(long long first, long long count) {
    check_range(first, count);
    std::vector<std::byte> bytes;
    std::string descr;
    std::vector<u64> shape;
    {
      gil_released release;
      std::lock_guard lock(m_);
      auto& r = open_reader();
      const auto* info = r.find_side_array("labels");
      if (info != nullptr) {
        if (!labels_checked_) {
          r.verify_side_array("labels");
          labels_checked_ = true;
        }
        descr = info->descr;
        shape.assign(info->shape.begin() + 1, info->shape.end());
        const u64 row = info->bytes / std::max<u64>(h_.geom.samples, 1);
        bytes.resize(static_cast<u64>(count) * row);
        r.read_side_array_rows("labels", static_cast<u64>(first), static_cast<u64>(count), bytes);
      }
    }
    return labels_of(std::move(bytes), descr, shape, static_cast<u64>(count));
  }

  std::string info_json() {
    // Of the file this Archive holds open, not of whatever has its name now.
    gil_released release;
    std::lock_guard lock(m_);
    return formats::json_text(formats::archive_info(open_reader()));
  }

 private:
  /** The reader; ValueError once closed. With m_ held. */
  formats::archive_reader& open_reader() {
    if (!r_) throw error(errc::invalid_argument, path_ + ": the archive is closed");
    return *r_;
  }

  /** IndexError unless [first, first + count) lies within the archive. */
  void check_range(long long first, long long count) const {
    const u64 n = h_.geom.samples;
    if (count < 0) throw error(errc::invalid_argument, "count must be 0 or more, not " + std::to_string(count));
    // count 0 at the end (first == n) is an empty read, as a[n:] is for a Python sequence.
    if (first < 0 || static_cast<u64>(first) > n ||
        static_cast<u64>(count) > n - static_cast<u64>(first) ||
        (count > 0 && static_cast<u64>(first) == n)) {
      const std::string which =
          count <= 1 ? "sample " + std::to_string(first)
                     : "samples " + std::to_string(first) + " to " +
                           (first < 0 ? std::to_string(first + (count - 1))  // -40 to -39
                                      : std::to_string(static_cast<u64>(first) +
                                                       static_cast<u64>(count) - 1));
      raise_sample_index_error(which + ": out of range; " + path_ + " has " + std::to_string(n) +
                               " samples" +
                               (n > 0 ? ", 0 to " + std::to_string(n - 1) : std::string()));
    }
  }

  /** The stored bytes of samples [first, first + count) (check_range'd), with m_ held. */
  std::vector<std::byte> read_coefficient_bytes(long long first, long long count) {
    auto& r = open_reader();
    std::vector<std::byte> coeffs(static_cast<u64>(count) * h_.coeff_bytes_per_sample());
    r.read_samples(static_cast<u64>(first), static_cast<u64>(count), coeffs);
    return coeffs;
  }

  std::string path_;
  fork_safe_mutex m_;  // held by a read (without the GIL) and by close()
  std::atomic<bool> closed_{false};
  std::optional<formats::archive_reader> r_;
  formats::archive_header h_;
  std::unique_ptr<backend> be_;
  std::unique_ptr<backend> be_serial_;  // for reads too small to share out (or null: be_ is)
  bool labels_checked_ = false;  // read_labels verified the labels' checksum (with m_ held)
};

/** What the two Python loaders share: the C++ loader, used under m_ and without the GIL, so
 *  that close() from another thread waits for a call in progress (one consumer at a time, as
 *  the loaders want); ValueError once closed. */
template <class Loader>
class closable_loader {
 public:
  template <class... Args>
  explicit closable_loader(Args&&... args) : l_(std::in_place, std::forward<Args>(args)...) {}

  /** `got`: the serial of the last batch Python holds (hand_over_kept), for settle(). */
  std::string state(std::optional<u64> got) {
    settle(got);
    if (before_pending_) return before_pending_->to_json();  // (not handed out yet)
    gil_released release;
    std::lock_guard lock(m_);
    return open().state().to_json();
  }
  void restore(const std::string& json) {
    const auto s = loaders::loader_state::from_json(json);
    drop_pending();
    gil_released release;
    std::lock_guard lock(m_);
    open().restore(s);
  }
  /** Stops the prefetch thread and releases the file; what was handed out stays valid (a
   *  batch owns its memory; a tensor keeps its buffer, not the loader). Using the loader
   *  afterwards raises ValueError. */
  void close() {
    drop_pending();
    gil_released release;  // the prefetch thread may be finishing a batch
    std::lock_guard lock(m_);
    closed_.store(true);
    l_.reset();
  }
  bool closed() const { return closed_.load(); }

 protected:
  /** The loader, with m_ held; ValueError once closed. */
  Loader& open() {
    if (!l_) throw error(errc::invalid_argument, "the loader is closed");
    return *l_;
  }
  /** The batch `t`, made with the GIL released, handed to Python, or, when a signal came
   *  meanwhile (Ctrl-C), kept for the next call while the signal's exception is raised here:
   *  Python raised it as the call returned, and the batch, which the loader had counted
   *  (its state past it), was lost, and a state saved in the handler resumed after it.
   *  `before` is the state before the batch, which state() says while it is kept. */
  py::tuple hand_over(py::tuple t, loaders::loader_state before) {
    if (PyErr_CheckSignals() != 0) {
      pending_ = std::move(t);
      before_pending_ = std::move(before);
      throw py::error_already_set();
    }
    return t;
  }
  /** hand_over, but the batch stays kept, with a serial number added to the tuple, until
   *  Python says it holds it (settle: the serial it passes to the next call): a signal that
   *  Python raises after this returns (as the call returns, or in the Python code around it,
   *  before the batch reached the caller) lost the batch, which the loader had counted. The
   *  next call, not told of it, hands the same batch out again; state() is the one before
   *  it meanwhile. (A tester's Ctrl-C storm lost 0 to 5 batches a run of 50 interrupts.) */
  py::tuple hand_over_kept(py::tuple t, loaders::loader_state before) {
    pending_serial_ = ++serial_;
    py::tuple with(t.size() + 1);
    for (std::size_t i = 0; i < t.size(); ++i) with[i] = t[i];
    with[t.size()] = py::int_(*pending_serial_);
    t = std::move(with);
    pending_ = t;
    before_pending_ = std::move(before);
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    return t;
  }
  /** A batch kept by hand_over_kept that Python holds (serial `got`) is no longer kept. */
  void settle(std::optional<u64> got) {
    if (pending_serial_ && got && *got == *pending_serial_) drop_pending();
  }
  /** The batch kept by hand_over_kept, handed out again (still kept), or nullopt. */
  std::optional<py::tuple> kept() const { return pending_serial_ ? pending_ : std::nullopt; }
  /** The batch kept by hand_over, handed out now (and no longer kept), or nullopt. */
  std::optional<py::tuple> take_pending() {
    std::optional<py::tuple> t = std::move(pending_);
    pending_.reset();
    before_pending_.reset();
    return t;
  }
  void drop_pending() {
    pending_.reset();
    before_pending_.reset();
    pending_serial_.reset();
  }
  fork_safe_mutex m_;  // (the C++ loaders renew their own state in a forked child)
  std::atomic<bool> closed_{false};
  std::optional<Loader> l_;
  std::optional<py::tuple> pending_;  // with the GIL held, as every Python object
  std::optional<loaders::loader_state> before_pending_;
  std::optional<u64> pending_serial_;  // hand_over_kept's batch, kept until settled
  u64 serial_ = 0;
};

/** The loader as a Python iterator of (data, labels or None, sample indices). */
class loader : public closable_loader<loaders::archive_loader> {
 public:
  loader(const std::string& path, const loaders::loader_options& o, int threads)
      : closable_loader(path, o, make_backend(backend_kind::cpu, {threads})),
        decode_(o.decode),
        batches_(l_->batches_per_epoch()),
        type_(l_->sample_type()),
        sample_shape_(l_->sample_geometry().sample_shape()),
        sample_bytes_(l_->sample_bytes()),
        label_descr_(l_->label_descr()),
        label_shape_(l_->label_shape()) {}

  // What a batch needs to become arrays is kept here, for use after the lock.

  /** The next batch, as a tuple (data, labels, samples, epoch, index, serial); `got`: the
   *  serial of the batch Python holds (settle), or None. */
  py::tuple next(std::optional<u64> got) {
    settle(got);
    if (auto again = kept()) return std::move(*again);  // (Python never held it)
    loaders::batch b;
    loaders::loader_state before;
    {
      gil_released release;  // the prefetch thread keeps working meanwhile
      std::lock_guard lock(m_);
      before = open().state();
      b = open().next();
    }
    const u64 n = b.samples.size();
    py::array data = decode_ ? array_of(std::move(b.data), numpy_dtype(type_),
                                        batch_shape(n, sample_shape_))
                             : array_of(std::move(b.data), py::dtype("u1"),
                                        {static_cast<py::ssize_t>(n),
                                         static_cast<py::ssize_t>(sample_bytes_)});
    py::object labels = labels_of(std::move(b.labels), label_descr_, label_shape_, n);
    py::array_t<u64> idx(static_cast<py::ssize_t>(n));
    std::memcpy(idx.mutable_data(), b.samples.data(), n * sizeof(u64));
    return hand_over_kept(py::make_tuple(data, labels, idx, b.epoch, b.index), std::move(before));
  }

  u64 batches_per_epoch() const { return batches_; }
  std::vector<u64> epoch_order(u64 e) {
    gil_released release;
    std::lock_guard lock(m_);
    return open().epoch_order(e);
  }

 private:
  bool decode_;
  u64 batches_;
  dtype type_;
  std::vector<u64> sample_shape_;
  u64 sample_bytes_;
  std::string label_descr_;
  std::vector<u64> label_shape_;
};

/** The device loader: each batch a DLPack capsule ("dltensor"), for torch.from_dlpack. */
class device_loader : public closable_loader<loaders::device_loader> {
 public:
  device_loader(const std::string& path, const loaders::loader_options& o, int device,
                int buffers)
      : closable_loader(path, o, device, buffers),
        device_(l_->device()),
        batches_(l_->batches_per_epoch()),
        label_descr_(l_->source().label_descr()),
        label_shape_(l_->source().label_shape()) {}

  py::tuple next(std::uintptr_t consumer_stream) {
    if (auto kept = take_pending()) return std::move(*kept);
    std::vector<u64> samples;
    std::vector<std::byte> labels;
    DLManagedTensor* t = nullptr;
    u64 epoch = 0;
    loaders::loader_state before;
    {
      gil_released release;
      std::lock_guard lock(m_);
      auto& l = open();
      before = l.state();
      epoch = before.epoch;  // the epoch of the batch that comes next: this one
      t = l.next(&samples, &labels, reinterpret_cast<void*>(consumer_stream));
    }
    // A capsule that nobody consumed still owns the tensor: its destructor calls the deleter.
    PyObject* cap = PyCapsule_New(t, "dltensor", [](PyObject* c) {
      if (PyCapsule_IsValid(c, "dltensor")) {
        auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
        if (m != nullptr && m->deleter != nullptr) m->deleter(m);
      }
    });
    if (cap == nullptr) {
      t->deleter(t);
      throw py::error_already_set();
    }
    py::object capsule = py::reinterpret_steal<py::object>(cap);
    py::array_t<u64> idx(static_cast<py::ssize_t>(samples.size()));
    std::memcpy(idx.mutable_data(), samples.data(), samples.size() * sizeof(u64));
    py::object lab = labels_of(std::move(labels), label_descr_, label_shape_, samples.size());
    return hand_over(py::make_tuple(capsule, lab, idx, epoch), std::move(before));
  }
  u64 batches_per_epoch() const { return batches_; }
  int device() const { return device_; }
  std::vector<u64> epoch_order(u64 e) {
    gil_released release;
    std::lock_guard lock(m_);
    return open().source().epoch_order(e);
  }

 private:
  int device_;
  u64 batches_;
  std::string label_descr_;
  std::vector<u64> label_shape_;
};

/** A NumPy array as a dataset to compress: C-contiguous and native-endian (dctchop.compress
 *  makes it so), read in place. The array must outlive the compression. */
formats::dataset_spec memory_spec(const py::array& a, const std::string& name) {
  const std::string descr = py::str(a.dtype().attr("str"));
  if (!a.dtype().attr("names").is_none()) {  // ('|V4' would be called raw bytes)
    throw error(errc::bad_input, name + ": structured dtypes (records with named fields) are "
                                        "not supported; pass one numeric field (a['name'])");
  }
  const auto t = formats::parse_npy_descr(descr);
  if (!t) throw error(errc::bad_input, name + ": " + formats::unsupported_descr_reason(descr));
  if (t->big_endian || !(a.flags() & py::array::c_style)) {
    throw error(errc::internal, name + ": not a native-endian C-order array");
  }
  formats::dataset_spec s;
  s.path = name;
  s.memory = formats::dataset_spec::memory_array{*t, {}, a.data()};
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.memory->shape.push_back(static_cast<u64>(a.shape(i)));
  return s;
}

/** The loader options that both Python loaders take, in their keyword order. */
loaders::loader_options options_of(std::size_t batch_size, bool shuffle, u64 seed,
                                   std::size_t shuffle_window, int rank, int world, bool drop_last,
                                   std::size_t prefetch) {
  loaders::loader_options o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  o.shuffle_window = shuffle_window;
  o.rank = rank;
  o.world = world;
  o.drop_last = drop_last;
  o.prefetch = prefetch;
  return o;
}

}  // namespace

PYBIND11_MODULE(_dctchop, m) {
  m.doc() = "dctchop: DCT+Chop archives as NumPy arrays, and a training loader";
  ::pthread_atfork(before_fork, nullptr, after_fork_in_child);
  m.attr("__version__") = DCTCHOP_VERSION_STRING;
  // dctchop.Error, and two kinds of it that are also the built-in exception a Python user
  // would catch: ValueError for bad arguments and values, OSError for I/O failures.
  static py::exception<error> exc(m, "Error", PyExc_RuntimeError);
  exc.attr("__doc__") =
      "An error of dctchop (a RuntimeError). `kind` names it: 'invalid_argument', 'bad_input',\n"
      "'corrupt', 'unsupported_version', 'out_of_range', 'io', 'output_exists',\n"
      "'backend_unavailable', 'quality_not_met', 'interrupted' or 'internal'. Bad arguments\n"
      "and bad input are also ValueError (ArgumentError), I/O failures OSError (FileError).\n"
      "'out_of_range' is a sample index out of range (SampleIndexError, an IndexError), or a\n"
      "value that the coefficient type cannot hold or data too small to measure (an\n"
      "ArgumentError): tell them by class.";
  // NAME, set on this module: a kind of `parent` (a dctchop class) that is also the built-in
  // `builtin`. `qualified` is where pickle finds it (a DataLoader worker sends its errors to
  // the parent process pickled).
  auto subclass = [&](const char* name, const char* qualified, const py::object& parent,
                      PyObject* builtin) {
    py::tuple bases = py::make_tuple(parent, py::reinterpret_borrow<py::object>(builtin));
    PyObject* cls = PyErr_NewException(qualified, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    py::object o = py::reinterpret_steal<py::object>(cls);
    m.attr(name) = o;
    return o;
  };
  static py::object value_error = subclass("ArgumentError", "dctchop.ArgumentError", exc, PyExc_ValueError);
  value_error.attr("__doc__") = "A bad argument or bad input (a dctchop.Error and a ValueError).";
  static py::object os_error = subclass("FileError", "dctchop.FileError", exc, PyExc_OSError);
  os_error.attr("__doc__") = "An I/O failure (a dctchop.Error and an OSError, errno set where "
                             "the system gave one).";
  // A sample out of range: IndexError, as a sequence raises, and a dctchop.Error (kind
  // 'out_of_range'), as the docs say every error is (it was a plain IndexError).
  static py::object index_error =
      subclass("SampleIndexError", "dctchop.SampleIndexError", exc, PyExc_IndexError);
  index_error.attr("__doc__") =
      "A sample index out of range (a dctchop.Error of kind 'out_of_range' and an IndexError).";
  // The OSError subclasses that Python's own open() raises for these errno values, each also
  // a dctchop.FileError: `except FileExistsError` works as with any Python file call. They stay
  // in dctchop._dctchop: as dctchop.FileExistsError, a star import would hide the built-in.
  struct os_kind {
    int code;
    py::object cls;
  };
  // Never destroyed: at process exit the interpreter that owns the classes is gone.
  static const auto* os_kinds = new std::vector<os_kind>{
      {EEXIST, subclass("FileExistsError", "dctchop._dctchop.FileExistsError", os_error,
                        PyExc_FileExistsError)},
      {ENOENT, subclass("FileNotFoundError", "dctchop._dctchop.FileNotFoundError", os_error,
                        PyExc_FileNotFoundError)},
      {EACCES, subclass("PermissionError", "dctchop._dctchop.PermissionError", os_error,
                        PyExc_PermissionError)},
      {EISDIR, subclass("IsADirectoryError", "dctchop._dctchop.IsADirectoryError", os_error,
                        PyExc_IsADirectoryError)},
      {ENOTDIR, subclass("NotADirectoryError", "dctchop._dctchop.NotADirectoryError", os_error,
                         PyExc_NotADirectoryError)}};
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const error& e) {
      py::object cls = exc;
      // Bad input (an array's dtype, shape or values, a file that is no dataset) is a bad
      // value to Python as much as a bad argument is: numpy raises ValueError for both.
      if (e.code() == errc::invalid_argument || e.code() == errc::out_of_range ||
          e.code() == errc::bad_input) {
        cls = value_error;
      }
      int code = e.os_errno();
      if (e.code() == errc::output_exists) code = EEXIST;
      if (e.code() == errc::io || e.code() == errc::output_exists) {
        cls = os_error;
        for (const auto& k : *os_kinds)
          if (k.code == (code == EPERM ? EACCES : code)) cls = k.cls;
      }
      py::object instance = cls(message_text(e.what()));
      instance.attr("kind") = to_string(e.code());  // "io", "corrupt", "bad_input", ...
      // errno and strerror as OSError(errno, strerror) would set them; str() stays the
      // message (FileError.__str__ in dctchop/__init__.py, which pickles them too, and names
      // the file where it knows it).
      if (code != 0) {
        instance.attr("errno") = code;
        if (PyObject_IsInstance(instance.ptr(), PyExc_OSError) == 1) {
          instance.attr("strerror") = std::strerror(code);
        }
      }
      PyErr_SetObject(cls.ptr(), instance.ptr());
    }
  });

  py::class_<archive>(m, "_Archive", "A .dcz archive opened for reading")
      .def(py::init<const std::string&, int>(), py::arg("path"), py::arg("threads") = 0)
      .def(py::init<const std::string&, const std::string&>(), py::arg("path"), py::arg("header"))
      .def("_header_json", &archive::header_json)
      .def("_identity", &archive::identity)
      .def_property_readonly("path", &archive::path)
      .def_property_readonly("closed", &archive::closed, "Whether close() was called.")
      .def("close", &archive::close, "release the file (the header's properties stay readable)")
      .def_property_readonly("samples", &archive::samples,
                             "Samples in the archive (1 for an HW archive: one image).")
      .def_property_readonly("shape", &archive::shape,
                             "The original array's shape, as a tuple (samples first, except HW).")
      .def_property_readonly("dtype", &archive::type,
                             "The original dtype, as NumPy names it ('uint8', 'float32', ...).")
      .def_property_readonly("block", &archive::block, "The DCT block size B (8 by default).")
      .def_property_readonly("chop", &archive::chop,
                             "The chop K: K x K coefficients kept of each B x B block.")
      .def_property_readonly("coeff", &archive::coeff,
                             "The coefficients' storage type: 'f16', 'bf16', 'f32' or 'i16'.")
      .def_property_readonly("layout", &archive::layout_name,
                             "How samples hold planes: 'HW', 'NHW', 'NHWC' or 'NCHW'.")
      .def_property_readonly("offset", &archive::offset,
                             "The value subtracted before the transform (128 for uint8, ...);\n"
                             "the matrix-form decode adds it back.")
      .def_property_readonly("planes", &archive::planes,
                             "2-D planes per sample (channels: C of NHWC or NCHW, else 1).")
      .def_property_readonly("height", &archive::height, "Each plane's height H.")
      .def_property_readonly("width", &archive::width, "Each plane's width W.")
      .def("read", &archive::read, py::arg("first"), py::arg("count") = 1,
           "decoded samples [first, first + count) as an array of shape (count, ...)")
      .def("read_coefficients", &archive::read_coefficients, py::arg("first"),
           py::arg("count") = 1,
           "samples [first, first + count) as stored: coefficient bytes, shape (count, bytes "
           "per sample), uint8 (dctchop.torch.coefficient_planes makes planes of them)")
      .def("labels", &archive::labels, "the labels side array, or None")
      .def("read_labels", &archive::read_labels, py::arg("first"), py::arg("count") = 1,
           "labels of samples [first, first + count), or None")
      .def("info_json", &archive::info_json, "what `dctchop info --json` prints");

  m.attr("_MAX_THREADS") = max_threads;  // as the command's --threads allows

  m.def(
      "_compress",
      [](const py::array& data, const std::string& output, const py::object& labels, int block,
         int chop, const std::string& coeff, const std::string& lay, const std::string& offset_rule,
         double offset_value, double chunk_mb, bool overwrite, bool quality, bool measure_ssim,
         std::optional<double> psnr, std::optional<double> ssim, int threads,
         std::optional<double> nonfinite, const py::object& progress, py::list trials) {
        formats::compress_options o;
        o.block = block;
        o.chop = chop;
        if (!coeff.empty()) {
          o.coeff = parse_coeff_type(coeff);
          if (!o.coeff) throw error(errc::invalid_argument, "coeff " + coeff + ": expected f16, bf16, f32 or i16");
        }
        const auto l = parse_layout(lay);
        if (!l) throw error(errc::invalid_argument, "layout " + lay + ": expected auto, HW, NHW, NHWC or NCHW");
        o.lay = *l;
        using rule = formats::offset_choice::rule;
        o.offset = {offset_rule == "mean" ? rule::first_mean
                    : offset_rule == "value" ? rule::value
                                             : rule::automatic,
                    offset_value};
        o.chunk_mb = chunk_mb;
        o.overwrite = overwrite;
        o.measure_quality = quality;
        o.ssim = measure_ssim;
        o.target.psnr_db = psnr;
        o.target.ssim = ssim;
        o.threads = threads;
        o.nonfinite_replacement = nonfinite;
        o.tool_version = DCTCHOP_VERSION_STRING;
        o.created = formats::parse_source_date_epoch(std::getenv("SOURCE_DATE_EPOCH"));  // as the command
        const auto spec = memory_spec(data, "<array>");
        py::array label_array;  // held here: the spec points into it while compress runs
        if (!labels.is_none()) {
          label_array = labels.cast<py::array>();
          o.labels = memory_spec(label_array, "<labels>");
        }
        auto be = make_backend(backend_kind::cpu, {threads});
        // A target search's measurements (on the compressing thread): a search that fails
        // hands them to the caller in `trials`, which the wrapper puts on the exception.
        std::vector<formats::chop_trial> made;
        o.on_trial = [&made](const formats::chop_trial& t) { made.push_back(t); };
        // The arrays stay referenced by the caller (and label_array here) meanwhile.
        try {
          const auto r = run_interruptible<formats::compress_result>(
              [&](const formats::progress_fn& report) {
                o.progress = report;
                return formats::compress(spec, output, *be, o);
              },
              progress);
          auto j = r.to_json();
          // As the command's report has them (names not UTF-8 with U+FFFD, as json_text
          // writes them: the caller's bytes, b"p\xe9.dcz", in either key alike).
          j["output"] = output;
          j["archive"] = output == "-" ? "<stdout>" : output;
          return formats::json_text(j);
        } catch (const error&) {
          for (const auto& t : made) trials.append(formats::json_text(formats::chop_trial_to_json(t)));
          throw;
        }
      },
      py::arg("data"), py::arg("output"), py::arg("labels"), py::arg("block"), py::arg("chop"),
      py::arg("coeff"), py::arg("layout"), py::arg("offset_rule"), py::arg("offset_value"),
      py::arg("chunk_mb"), py::arg("overwrite"), py::arg("quality"), py::arg("measure_ssim"),
      py::arg("psnr"), py::arg("ssim"), py::arg("threads"), py::arg("nonfinite"),
      py::arg("progress"), py::arg("trials"));

  m.def(
      "decode_matrices",
      [](int block, int chop, u64 height, u64 width) {
        codec_params p;
        p.block = block;
        p.chop = chop;
        const auto dm = make_decode_matrices(p, height, width);
        py::array_t<double> lt({static_cast<py::ssize_t>(dm.hp), static_cast<py::ssize_t>(dm.kh)});
        py::array_t<double> r({static_cast<py::ssize_t>(dm.kw), static_cast<py::ssize_t>(dm.wp)});
        std::memcpy(lt.mutable_data(), dm.lt.data(), dm.lt.size() * sizeof(double));
        std::memcpy(r.mutable_data(), dm.r.data(), dm.r.size() * sizeof(double));
        return py::make_tuple(lt, r);
      },
      py::arg("block"), py::arg("chop"), py::arg("height"), py::arg("width"),
      "Lt (Hp x Kh) and R (Kw x Wp) of the matrix-form decode: X' = Lt @ C @ R, cropped to "
      "H x W, plus the offset");

  py::class_<device_loader>(m, "_DeviceLoader")
      .def(py::init([](const std::string& path, std::size_t batch_size, bool shuffle, u64 seed,
                       std::size_t shuffle_window, int rank, int world, bool drop_last,
                       std::size_t prefetch, int device, int buffers, std::size_t threads) {
             auto o = options_of(batch_size, shuffle, seed, shuffle_window, rank, world, drop_last,
                                 prefetch);
             o.threads = threads;  // host threads that make each batch
             return std::make_unique<device_loader>(path, o, device, buffers);
           }),
           py::arg("path"), py::arg("batch_size") = 32, py::arg("shuffle") = true,
           py::arg("seed") = 0, py::arg("shuffle_window") = 4, py::arg("rank") = 0,
           py::arg("world") = 1, py::arg("drop_last") = true, py::arg("prefetch") = 2,
           py::arg("device") = -1, py::arg("buffers") = 2, py::arg("threads") = 1)
      .def("next", &device_loader::next, py::arg("consumer_stream") = 0)
      .def("epoch_order", &device_loader::epoch_order, py::arg("epoch"))
      .def_property_readonly("batches_per_epoch", &device_loader::batches_per_epoch,
                             "Batches in one epoch of this rank (len(loader)).")
      .def_property_readonly("device", &device_loader::device)
      .def("close", &device_loader::close)
      .def_property_readonly("closed", &device_loader::closed, "Whether close() was called.")
      .def("state", &device_loader::state, py::arg("got") = py::none())
      .def("restore", &device_loader::restore, py::arg("state_json"));

  py::class_<loader>(m, "_Loader")
      .def(py::init([](const std::string& path, std::size_t batch_size, bool shuffle, u64 seed,
                       std::size_t shuffle_window, int rank, int world, bool drop_last,
                       std::size_t prefetch, bool decode, int threads) {
             auto o = options_of(batch_size, shuffle, seed, shuffle_window, rank, world, drop_last,
                                 prefetch);
             o.decode = decode;
             return std::make_unique<loader>(path, o, threads);
           }),
           py::arg("path"), py::arg("batch_size") = 32, py::arg("shuffle") = true,
           py::arg("seed") = 0, py::arg("shuffle_window") = 4, py::arg("rank") = 0,
           py::arg("world") = 1, py::arg("drop_last") = true, py::arg("prefetch") = 2,
           py::arg("decode") = true, py::arg("threads") = 1)
      .def("next", &loader::next, py::arg("got") = py::none())
      .def("close", &loader::close)
      .def_property_readonly("closed", &loader::closed, "Whether close() was called.")
      .def_property_readonly("batches_per_epoch", &loader::batches_per_epoch,
                             "Batches in one epoch of this rank (len(loader)).")
      .def("state", &loader::state, py::arg("got") = py::none())
      .def("restore", &loader::restore, py::arg("state_json"))
      .def("epoch_order", &loader::epoch_order, py::arg("epoch"));
}
