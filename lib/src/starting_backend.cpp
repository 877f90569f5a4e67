#include "starting_backend.hpp"

#include <utility>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/error.hpp"

namespace dctchop::detail {

starting_backend::starting_backend(std::string name, int threads, start_fn start,
                                   std::unique_ptr<backend> stopgap,
                                   std::shared_ptr<std::pmr::memory_resource> memory,
                                   fallback_fn on_fallback)
    : name_(std::move(name)),
      threads_(threads),
      start_(std::move(start)),
      stopgap_(std::move(stopgap)),
      memory_(std::move(memory)),
      on_fallback_(std::move(on_fallback)) {
  if (!start_ || !stopgap_) throw error(errc::internal, "starting_backend: nothing to start");
  // A quiet thread (the driver's threads it starts inherit its mask): the command-line
  // tool's handlers interrupt the blocking reads and writes of its own threads.
  thread_ = start_quiet_thread([this] { run(); });
}

starting_backend::~starting_backend() {
  if (thread_.joinable()) thread_.join();
}

void starting_backend::run() {
  std::unique_ptr<backend> made;
  std::exception_ptr failure;
  try {
    made = start_();
  } catch (...) {
    failure = std::current_exception();
  }
  {
    const std::lock_guard lock(m_);
    if (made) {
      started_ = std::move(made);
      st_ = state::up;
    } else {
      error_ = failure;  // nullptr: no device, which `automatic` tells nothing of
      st_ = state::failed;
    }
  }
  cv_.notify_all();
}

backend& starting_backend::settled(std::string& tell) {
  if (st_ == state::up) return *started_;
  // Failed.
  if (!on_fallback_) {
    if (error_) std::rethrow_exception(error_);
    throw error(errc::internal, name_ + " backend: its start gave nothing and no error");
  }
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const error& e) {
      if (e.code() != errc::backend_unavailable) throw;
      if (!told_) tell = e.what();
    }
  }
  told_ = true;
  return *stopgap_;
}

backend& starting_backend::target() {
  std::string tell;
  backend* b = nullptr;
  {
    const std::lock_guard lock(m_);
    if (st_ == state::starting) {
      ++stopgap_calls_;
      return *stopgap_;
    }
    b = &settled(tell);
  }
  if (!tell.empty()) on_fallback_(tell);
  return *b;
}

void starting_backend::wait_started() {
  std::string tell;
  {
    std::unique_lock lock(m_);
    cv_.wait(lock, [this] { return st_ != state::starting; });
    (void)settled(tell);
  }
  if (!tell.empty()) on_fallback_(tell);
}

std::string starting_backend::name() const {
  const std::lock_guard lock(m_);
  if (st_ == state::up) return started_->name();
  if (st_ == state::failed && on_fallback_) return stopgap_->name();
  return name_;
}

std::uint64_t starting_backend::stopgap_calls() const {
  const std::lock_guard lock(m_);
  return stopgap_calls_;
}

void starting_backend::encode(const codec_params& p, const const_sample_view& in,
                              std::span<std::byte> coeffs) {
  target().encode(p, in, coeffs);
}

void starting_backend::decode(const codec_params& p, std::span<const std::byte> coeffs,
                              const sample_view& out) {
  target().decode(p, coeffs, out);
}

bool starting_backend::decode_measured(const codec_params& p, std::span<const std::byte> coeffs,
                                       const const_sample_view& original,
                                       const quality_accumulator& acc, quality_batch& into) {
  return target().decode_measured(p, coeffs, original, acc, into);
}

}  // namespace dctchop::detail
