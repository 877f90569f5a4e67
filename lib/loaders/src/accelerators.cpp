#include "dctchop/accelerators.hpp"

#include <cstring>
#include <exception>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/json_number.hpp"
#include "dctchop/matrix_form.hpp"

namespace dctchop::accel {
namespace {

using u64 = std::uint64_t;

std::vector<std::byte> convert(const std::vector<double>& v, coeff_type format) {
  std::vector<std::byte> out(v.size() * size_of(format));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    if (format == coeff_type::f32) {
      std::memcpy(out.data() + i * 4, &f, 4);
    } else {
      const std::uint16_t h =
          format == coeff_type::f16 ? detail::float_to_half(f) : detail::float_to_bf16(f);
      std::memcpy(out.data() + i * 2, &h, 2);
    }
  }
  return out;
}

}  // namespace

device_matrices export_decode_matrices(const codec_params& p, u64 height, u64 width,
                                       coeff_type format) {
  if (format == coeff_type::i16) {
    throw error(errc::invalid_argument, "decode matrices come in f16, bf16 or f32, not i16");
  }
  const auto m = make_decode_matrices(p, height, width);
  device_matrices d;
  d.hp = m.hp;
  d.wp = m.wp;
  d.kh = m.kh;
  d.kw = m.kw;
  d.format = format;
  d.lt = convert(m.lt, format);
  d.r = convert(m.r, format);
  return d;
}

// ---- IPU ----------------------------------------------------------------------------------

struct ipu_feed::impl {
  ipu_options o;
  std::unique_ptr<archive_loader> l;
  std::size_t sample_bytes = 0, label_bytes = 0;
  /** A micro-batch handed to the engine, kept until complete() (a withdrawn prefetch is
   *  handed out again). It holds the loader's batch itself: the only copy is into the
   *  engine's buffer. */
  struct item {
    byte_buffer data;
    std::vector<std::byte> labels;
    loader_state after;  // the loader's state once this micro-batch is consumed
    bool prefetched = false;
    bool placeholder = false;  // for a fetch that failed: its completion moves no state
  };
  std::deque<item> in_flight;  // handed to the engine, not yet complete, oldest first
  std::deque<item> replay;     // withdrawn prefetches, to hand out again first
  u64 completed = 0;
  loader_state done_state;     // after the last completed micro-batch
  std::exception_ptr err;
  mutable std::mutex m;

  /** The next micro-batch: a withdrawn one first, else the loader's next batch; with
   *  `wait` false, std::nullopt when the loader's prefetch thread has none ready yet. */
  std::optional<item> next_item(bool wait) {
    if (!replay.empty()) {
      item it = std::move(replay.front());
      replay.pop_front();
      return it;
    }
    std::optional<batch> ready = wait ? l->next() : l->try_next();
    if (!ready) return std::nullopt;
    batch& b = *ready;
    item it;
    it.data = std::move(b.data);  // micro_batch samples: drop_last is on
    it.labels = std::move(b.labels);
    it.after = l->state();
    return it;
  }
  /** The engine's buffer: the samples' coefficients, then their labels. */
  void copy_out(const item& it, void* dst) const {
    auto* out = static_cast<std::byte*>(dst);
    std::memcpy(out, it.data.data(), it.data.size());
    if (!it.labels.empty()) {
      std::memcpy(out + o.micro_batch * sample_bytes, it.labels.data(), it.labels.size());
    }
  }
  std::size_t micro_batch_bytes() const { return o.micro_batch * (sample_bytes + label_bytes); }
};

ipu_feed::ipu_feed(const std::string& archive, const ipu_options& options)
    : impl_(std::make_unique<impl>()) {
  impl& d = *impl_;
  d.o = options;
  if (d.o.micro_batch == 0 || d.o.device_iterations == 0 || d.o.replicas == 0 ||
      d.o.gradient_accumulation == 0) {
    throw error(errc::invalid_argument, "IPU feed: batch sizes and counts must be at least 1");
  }
  // One feed per replica, each with its shard: a world that the replicas do not divide (the
  // default 1, say) would give every replica the same micro-batches.
  if (d.o.replicas > 1 && (d.o.loader.world <= 0 ||
                           static_cast<std::size_t>(d.o.loader.world) % d.o.replicas != 0)) {
    throw error(errc::invalid_argument,
                "IPU feed: " + std::to_string(d.o.replicas) + " replicas with loader.world " +
                    std::to_string(d.o.loader.world) +
                    ": give each replica's feed loader.rank = its replica index and "
                    "loader.world = the replicas (times the hosts), or every replica gets the "
                    "same micro-batches");
  }
  loader_options lo = d.o.loader;
  lo.batch_size = d.o.micro_batch;
  lo.decode = false;
  lo.drop_last = true;  // static shapes
  d.l = std::make_unique<archive_loader>(archive, lo);
  d.sample_bytes = d.l->sample_bytes();
  d.label_bytes = d.l->label_bytes();
  d.done_state = d.l->state();
  // A step's bytes must be a count (2^62 device iterations made step_bytes() 0).
  std::size_t step = 0;
  if (__builtin_mul_overflow(d.o.micro_batch, d.sample_bytes + d.label_bytes, &step) ||
      __builtin_mul_overflow(step, d.o.device_iterations, &step) ||
      __builtin_mul_overflow(step, d.o.replicas, &step) ||
      __builtin_mul_overflow(step, d.o.gradient_accumulation, &step)) {
    throw error(errc::invalid_argument,
                "IPU feed: a step of " + std::to_string(d.o.micro_batch) + " samples x " +
                    std::to_string(d.o.device_iterations) + " device iterations x " +
                    std::to_string(d.o.replicas) + " replicas x " +
                    std::to_string(d.o.gradient_accumulation) +
                    " accumulated is more bytes than a size holds");
  }
}

ipu_feed::~ipu_feed() = default;

std::size_t ipu_feed::micro_batch_bytes() const noexcept { return impl_->micro_batch_bytes(); }
std::size_t ipu_feed::step_bytes() const noexcept {
  const auto& o = impl_->o;
  return micro_batch_bytes() * o.device_iterations * o.replicas * o.gradient_accumulation;
}
std::uint64_t ipu_feed::completed() const noexcept {
  std::lock_guard lock(impl_->m);  // the engine's callbacks may run on other threads
  return impl_->completed;
}
loader_state ipu_feed::state() const {
  std::lock_guard lock(impl_->m);
  return impl_->done_state;
}
const geometry& ipu_feed::sample_geometry() const noexcept { return impl_->l->sample_geometry(); }
const codec_params& ipu_feed::codec() const noexcept { return impl_->l->codec(); }

stream_callback::result ipu_feed::prefetch(void* dst) noexcept {
  impl& d = *impl_;
  std::lock_guard lock(d.m);
  if (d.err) return result::not_available;
  u64 prefetched = 0;
  for (const auto& it : d.in_flight) prefetched += it.prefetched ? 1 : 0;
  if (prefetched >= d.o.max_prefetched) return result::not_available;
  try {
    // A speculative call does not wait: the engine asks again, or fetches.
    std::optional<impl::item> next = d.next_item(false);
    if (!next) return result::not_available;
    impl::item& it = *next;
    d.copy_out(it, dst);
    it.prefetched = true;
    d.in_flight.push_back(std::move(it));
    return result::success;
  } catch (...) {
    d.err = std::current_exception();
    return result::not_available;
  }
}

void ipu_feed::fetch(void* dst) noexcept {
  impl& d = *impl_;
  std::lock_guard lock(d.m);
  try {
    impl::item it = *d.next_item(true);
    d.copy_out(it, dst);
    it.prefetched = false;
    d.in_flight.push_back(std::move(it));
  } catch (...) {
    if (!d.err) d.err = std::current_exception();
    std::memset(dst, 0, d.micro_batch_bytes());
    // A placeholder, so that the engine's complete() for it pops nothing real, and leaves
    // the state where the micro-batches before it took it.
    impl::item it;
    it.placeholder = true;
    d.in_flight.push_back(std::move(it));
  }
}

void ipu_feed::complete() noexcept {
  impl& d = *impl_;
  std::lock_guard lock(d.m);
  if (d.in_flight.empty()) {
    // Poplar completes each fetch, and each prefetch it did not withdraw, once: one more is
    // the adapter's mistake, kept for rethrow_error() rather than passed over.
    if (!d.err) {
      d.err = std::make_exception_ptr(
          error(errc::invalid_argument, "IPU feed: complete() with no micro-batch in flight (one per "
                                "fetch, and per prefetch not withdrawn)"));
    }
    return;
  }
  if (!d.in_flight.front().placeholder) d.done_state = d.in_flight.front().after;
  d.in_flight.pop_front();
  ++d.completed;
}

void ipu_feed::invalidate_prefetched() noexcept {
  impl& d = *impl_;
  std::lock_guard lock(d.m);
  // Withdrawn prefetches come again first, in their order, before anything newer.
  std::deque<impl::item> keep, withdrawn;
  for (auto& it : d.in_flight) (it.prefetched ? withdrawn : keep).push_back(std::move(it));
  d.in_flight = std::move(keep);
  for (auto it = withdrawn.rbegin(); it != withdrawn.rend(); ++it) d.replay.push_front(std::move(*it));
}

void ipu_feed::restore(const loader_state& s) {
  impl& d = *impl_;
  std::lock_guard lock(d.m);
  d.l->restore(s);  // refuses a state of another loader, with nothing changed
  d.in_flight.clear();
  d.replay.clear();
  d.err = nullptr;
  d.done_state = d.l->state();
}

void ipu_feed::rethrow_error() {
  std::lock_guard lock(impl_->m);
  if (impl_->err) std::rethrow_exception(impl_->err);
}

// ---- CS-2 ---------------------------------------------------------------------------------

namespace {
loader_options cs2_loader(const cs2_options& o) {
  // In the feed's own names (the loader's said world and rank, which the caller never set).
  if (o.num_workers < 1) {
    throw error(errc::invalid_argument,
                "CS-2 feed: num_workers must be at least 1, not " + std::to_string(o.num_workers));
  }
  if (o.worker_id < 0 || o.worker_id >= o.num_workers) {
    throw error(errc::invalid_argument, "CS-2 feed: worker_id " + std::to_string(o.worker_id) +
                                            " is outside 0.." + std::to_string(o.num_workers - 1));
  }
  loader_options lo = o.loader;
  lo.batch_size = o.batch_size;
  lo.rank = o.worker_id;
  lo.world = o.num_workers;
  lo.drop_last = true;  // static batch shapes, the same batch count on every worker
  lo.decode = false;
  return lo;
}
}  // namespace

cs2_worker_feed::cs2_worker_feed(const std::string& archive, const cs2_options& options)
    : o_(options), l_(archive, cs2_loader(options)) {}

batch cs2_worker_feed::next() { return l_.next(); }
std::uint64_t cs2_worker_feed::batches_per_epoch() const noexcept { return l_.batches_per_epoch(); }

const archive_loader& cs2_worker_feed::loader() const noexcept { return l_; }

std::string cs2_worker_feed::state_dict() const {
  // The loader's state (which records how it cuts the archive into batches, for restore to
  // check) and the worker's place.
  auto j = nlohmann::json::parse(l_.state().to_json());
  j["worker_id"] = o_.worker_id;
  j["num_workers"] = o_.num_workers;
  return j.dump();
}

void cs2_worker_feed::load_state_dict(const std::string& text) {
  nlohmann::json j;
  loader_state s;
  try {
    std::string twice;
    bool deep = false;
    j = formats::parse_json_naming_once(text, twice, nullptr, &deep);
    if (deep) {
      throw error(errc::invalid_argument,
                  "not a CS-2 feed state: it nests arrays and objects more than " +
                      std::to_string(formats::max_json_depth) + " deep");
    }
    if (j.is_discarded()) throw error(errc::invalid_argument, "not a CS-2 feed state: not JSON");
    if (!twice.empty()) {
      throw error(errc::invalid_argument, "not a CS-2 feed state: it names " + twice + " twice");
    }
    if (formats::json_integer<int>(j.at("worker_id")) != o_.worker_id ||
        formats::json_integer<int>(j.at("num_workers")) != o_.num_workers ||
        formats::json_integer<std::size_t>(j.at("batch_size")) != o_.batch_size) {
      throw error(errc::invalid_argument,
                  "this state belongs to worker " +
                      std::to_string(formats::json_integer<int>(j.at("worker_id"))) + " of " +
                      std::to_string(formats::json_integer<int>(j.at("num_workers"))) +
                      " (or another batch size)");
    }
    if (j.contains("samples")) {
      s = loader_state::from_json(text);  // restore checks the rest
    } else {  // saved before 2026-12-02: epoch, position and seed only
      s = {formats::json_integer<u64>(j.at("epoch")), formats::json_integer<u64>(j.at("position")),
           formats::json_integer<u64>(j.at("seed")), std::nullopt};
      // Workers then took every num_workers-th sample: within an epoch the new slices would
      // skip some samples and repeat others. At an epoch's start there is nothing to get wrong.
      if (o_.num_workers > 1 && s.position > 0) {
        throw error(errc::invalid_argument,
                    "this CS-2 state was saved before 2026-12-02, when each of several workers "
                    "took every num_workers-th sample: resumed at batch " +
                        std::to_string(s.position) +
                        " it would give other samples; resume from the start of its epoch "
                        "(position 0) instead");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw error(errc::invalid_argument, "not a CS-2 feed state: " + formats::json_error_text(e));
  } catch (const std::out_of_range& e) {
    throw error(errc::invalid_argument, std::string("not a CS-2 feed state: ") + e.what());
  }
  l_.restore(s);
}

}  // namespace dctchop::accel
