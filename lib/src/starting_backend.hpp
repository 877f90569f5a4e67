// Internal: a backend that starts on a thread of its own and meanwhile runs the calls on
// another (backend_options::start_in_background).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <string>
#include <thread>

#include "dctchop/codec.hpp"

namespace dctchop::detail {

/** Starting a CUDA backend costs the driver's start (a quarter of a second or more on the
 *  GPUs measured), which would otherwise come before a pipeline's first read. This one runs
 *  `start` on a thread of its own and sends the calls that come meanwhile to `stopgap` (the
 *  CPU backend, which gives the same bytes), then every call after it to what `start` made.
 *  Calls may come from several threads: each goes to one of the two as a whole. */
class starting_backend final : public backend {
 public:
  using start_fn = std::function<std::unique_ptr<backend>()>;
  using fallback_fn = std::function<void(const std::string& why)>;

  /** `name` and `threads` are what the started backend will say (name() gives the stopgap's
   *  where `start` fails and the stopgap goes on). `memory` is host_memory() throughout.
   *  Where `start` throws or returns nullptr: with `on_fallback` empty (the backend was asked
   *  for by name), the next call and wait_started() throw its error (nullptr: an internal
   *  one); set (`automatic`), the calls go on with `stopgap`, and an error(backend_unavailable)
   *  is told to `on_fallback` once, on the thread of the call that first meets it (nullptr,
   *  "no device", is told nothing); any other error is thrown as above. A thread the system
   *  will not start is error(io), from here. */
  starting_backend(std::string name, int threads, start_fn start, std::unique_ptr<backend> stopgap,
                   std::shared_ptr<std::pmr::memory_resource> memory, fallback_fn on_fallback);
  /** Waits for `start` to return: a thread left starting the driver while the process
   *  exits would meet the runtime torn down under it. */
  ~starting_backend() override;
  starting_backend(const starting_backend&) = delete;
  starting_backend& operator=(const starting_backend&) = delete;

  std::string name() const override;
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override;
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override;
  bool decode_measured(const codec_params& p, std::span<const std::byte> coeffs,
                       const const_sample_view& original, const quality_accumulator& acc,
                       quality_batch& into) override;
  int threads() const override { return threads_; }
  std::shared_ptr<std::pmr::memory_resource> host_memory() const override { return memory_; }
  void wait_started() override;

  /** Calls that ran on the stopgap while the backend started (for tests and logs). */
  std::uint64_t stopgap_calls() const;

 private:
  enum class state { starting, up, failed };
  void run();
  /** The backend this call goes to; a failure's error or note, as the constructor says. */
  backend& target();
  /** With the lock held and the state settled: the started backend, or the stopgap, or the
   *  failure's error; sets `tell` to a note for on_fallback_ (told by the caller, unlocked). */
  backend& settled(std::string& tell);

  std::string name_;
  int threads_;
  start_fn start_;
  std::unique_ptr<backend> stopgap_;
  std::shared_ptr<std::pmr::memory_resource> memory_;
  fallback_fn on_fallback_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  state st_ = state::starting;
  std::unique_ptr<backend> started_;
  std::exception_ptr error_;
  bool told_ = false;
  std::uint64_t stopgap_calls_ = 0;
  std::thread thread_;
};

}  // namespace dctchop::detail
