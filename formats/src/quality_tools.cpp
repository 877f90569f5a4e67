// dctchop eval and dctchop verify: measuring settings without writing, and gating archives.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dctchop/detail/quiet_thread.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/npy.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "chunk_pipeline.hpp"
#include "pipeline_util.hpp"

namespace dctchop::formats {

using namespace detail;

namespace {

/** Threads kept for eval's timed passes. run(parts, fn) calls fn(i, t) for each part i < parts,
 *  on the caller (t = 0) and the kept threads (t = 1, 2, ...), which claim parts as they
 *  come; the caller waits for the parts claimed, never for a thread that did not wake in time
 *  (one whose core another process holds: it finds no part left and sleeps again). The
 *  error of the lowest part that failed is thrown, as a serial loop would meet it first. */
class pass_crew {
 public:
  explicit pass_crew(std::size_t helpers) {
    threads_.reserve(helpers);  // (no allocation between a start and its keeping)
    for (std::size_t t = 1; t <= helpers; ++t) {
      try {
        threads_.push_back(dctchop::detail::start_quiet_thread([this, t] { serve(t); }));
      } catch (const error&) {
        break;  // the system's limit on threads: fewer
      }
    }
  }
  ~pass_crew() { stop(); }
  pass_crew(const pass_crew&) = delete;
  pass_crew& operator=(const pass_crew&) = delete;
  /** Threads that take parts: the caller and those kept. */
  std::size_t size() const { return threads_.size() + 1; }

  void run(std::size_t parts, const std::function<void(std::size_t, std::size_t)>& fn) {
    {
      const std::lock_guard lock(m_);
      job_ = &fn;
      parts_ = parts;
      next_ = done_ = 0;
      first_ = nullptr;
      first_at_ = parts;
      ++generation_;
    }
    wake_.notify_all();
    work(0);
    std::unique_lock lock(m_);
    finished_.wait(lock, [&] { return done_ == next_; });  // (every part claimed is done)
    job_ = nullptr;
    if (first_) std::rethrow_exception(std::exchange(first_, nullptr));
  }

 private:
  void stop() noexcept {
    {
      const std::lock_guard lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void work(std::size_t t) {
    std::unique_lock lock(m_);
    while (job_ != nullptr && next_ < parts_) {
      const std::size_t i = next_++;
      const auto* fn = job_;
      lock.unlock();
      std::exception_ptr failed;
      try {
        (*fn)(i, t);
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed && i < first_at_) {
        first_ = failed;
        first_at_ = i;
      }
      ++done_;
    }
    if (done_ == next_) finished_.notify_all();
  }
  void serve(std::size_t t) {
    std::uint64_t seen = 0;
    std::unique_lock lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      lock.unlock();
      work(t);
      lock.lock();
    }
  }

  std::mutex m_;
  std::condition_variable wake_, finished_;
  std::vector<std::thread> threads_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::size_t parts_ = 0, next_ = 0, done_ = 0, first_at_ = 0;
  std::exception_ptr first_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

/** A measured figure and the gate it failed, as text: the gate as the shortest number that
 *  reads back as it, the figure with at least `digits` significant digits and more where
 *  fewer would put it on the gate or past it ("max abs error 193.0001 exceeds 193", not
 *  "193 exceeds 193"). */
std::pair<std::string, std::string> apart(double measured, double gate, int digits) {
  // p significant digits, as %g but without an exponent for everyday magnitudes ("30", not
  // "3e+01"; "12346", not "1.235e+04").
  auto text = [](double v, int p) {
    char b[400];
    std::snprintf(b, sizeof b, "%.*g", p, v);
    const double a = std::fabs(v);
    if (std::strchr(b, 'e') != nullptr && a >= 1e-4 && a < 1e15) {
      const int decimals = std::max(0, p - 1 - static_cast<int>(std::floor(std::log10(a))));
      std::snprintf(b, sizeof b, "%.*f", decimals, v);
    }
    return std::string(b);
  };
  std::string g = text(gate, 17);
  for (int p = 1; p < 17; ++p) {
    if (std::strtod(text(gate, p).c_str(), nullptr) == gate) {
      g = text(gate, p);
      break;
    }
  }
  std::string m = text(measured, 17);
  for (int p = digits; p < 17; ++p) {
    const double r = std::strtod(text(measured, p).c_str(), nullptr);
    if (r != gate && (r < gate) == (measured < gate)) {
      m = text(measured, p);
      break;
    }
  }
  return {m, g};
}

/** A note when `q`, measured against an original, is far from the quality recorded in the
 *  archive's footer when it was made (the same decode, so it agrees to a small fraction of a
 *  dB on the data that was compressed): the original is likely other data, or changed since,
 *  or the decompressed output itself. "" when they agree, when nothing was recorded, and near
 *  lossless (both above 60 dB), where another backend's rounding of a few values moves the
 *  figure by more than 0.5 dB. */
std::string recorded_quality_note(const nlohmann::json& footer, const quality& q,
                                  const std::string& archive, const std::string& input) {
  if (!footer.contains("quality") || !footer["quality"].contains("mse") ||
      !footer["quality"]["mse"].is_number() || !(q.range > 0)) {
    return {};
  }
  const double made = footer["quality"]["mse"].get<double>();
  const double now = q.mse;
  // PSNR, +inf for 0: the comparisons below need no case of their own for lossless.
  auto psnr = [&q](double mse) { return 20 * std::log10(q.range) - 10 * std::log10(mse); };
  auto figure = [&](double mse) {
    if (mse == 0) return std::string("no error (lossless)");
    char b[64];
    std::snprintf(b, sizeof b, "PSNR %.2f dB", psnr(mse));
    return std::string(b);
  };
  constexpr double near_lossless_db = 60;
  if (std::min(psnr(now), psnr(made)) >= near_lossless_db) return {};
  if (now == 0) {
    return input + " equals the decoded data exactly, but " + archive + " recorded " +
           figure(made) + " against the data it was made from: is " + input +
           " the decompressed output rather than the original?";
  }
  if (made > 0 && std::fabs(psnr(now) - psnr(made)) <= 0.5) return {};
  return archive + " decoded at " + figure(made) + " against the data it was made from, but at " +
         figure(now) + " against " + input + ": is " + input + " that data, unchanged?";
}

/** Reads `r`'s chunks from where it stands to its end and its side arrays, checking every
 *  checksum (and for a stream the index too; error(corrupt) on the first fault), calling
 *  `progress` after each chunk. Returns the chunks read. */
u64 read_to_end(archive_reader& r, const progress_fn& progress) {
  std::vector<std::byte> buf;
  chunk_info c;
  u64 chunks = 0;
  while (r.next_chunk(c, buf)) {
    ++chunks;
    if (progress) progress(c.first + c.count, r.header().geom.samples);
  }
  for (const auto& s : r.side_arrays()) r.verify_side_array(s.name);  // in pieces
  return chunks;
}

/** "" where the labels `r` stores equal `labels` byte for byte (NumPy descr and shape
 *  too), else the mismatch. Reads the stored labels once, checking their checksum (whether or
 *  not they are compared), and sets res.labels. */
std::string labels_difference(archive_reader& r, sample_source& labels, verify_result& res) {
  res.labels = verify_result::labels_check{labels.name(), labels.rows(), std::nullopt};
  const std::string descr = labels.type().native_descr();
  // (Types in NumPy's names, "int64": its codes read "<u8" as uint64, dctchop's u8 as uint8.)
  const std::string given =
      labels.name() + " is " + shape_text(labels.shape()) + " " + labels.type().numpy_name();
  const side_array_info* stored = r.find_side_array("labels");
  if (stored == nullptr) return r.display_name() + " holds no labels, but --labels " + given;
  if (stored->shape != labels.shape() || stored->descr != descr) {
    r.verify_side_array("labels");  // (damaged: corrupt, whatever they are compared with)
    const auto type = parse_npy_descr(stored->descr);  // (checked when the archive was opened)
    return r.display_name() + "'s labels are " + shape_text(stored->shape) + " " +
           (type ? type->numpy_name() : stored->descr) + ", but " + given;
  }
  const u64 rows = labels.rows(), row_bytes = labels.row_bytes();
  const row_source archived = r.side_array_in_order("labels");
  std::vector<std::byte> kept;
  u64 differing = 0, first_differing = 0;
  for_each_row_piece(
      rows, row_bytes, [&](u64 first, u64 n, void* dst) { labels.read_rows(first, n, dst); },
      [&](const void* data, u64 first, u64 n) {
        kept.resize(n * row_bytes);
        archived(first, n, kept.data());
        const auto* theirs = static_cast<const std::byte*>(data);
        for (u64 k = 0; k < n; ++k) {
          if (std::memcmp(kept.data() + k * row_bytes, theirs + k * row_bytes, row_bytes) != 0 &&
              differing++ == 0) {
            first_differing = first + k;
          }
        }
      });
  res.labels->rows_differing = differing;
  if (differing == 0) return {};
  return r.display_name() + "'s labels and " + labels.name() + " differ in " +
         std::to_string(differing) + " of " + std::to_string(rows) + " rows" +
         (rows == 1 ? "" : ", the first row " + std::to_string(first_differing));
}

}  // namespace

nlohmann::json eval_row::to_json() const {
  nlohmann::json j;
  j["block"] = block;
  j["chop"] = chop;
  j["coeff"] = std::string(to_string(coeff));
  j["passes"] = passes;  // (where the setting cannot hold the data: those before its failure)
  if (!error.empty()) {
    j["error"] = error;
    return j;
  }
  j["archive_bytes"] = archive_bytes;
  j["ratio"] = ratio();
  j["bits_per_value"] = bits_per_value();
  j["quality"] = quality_to_json(q);
  j["compress_gbps"] = compress_gbps();
  j["decompress_gbps"] = decompress_gbps();
  return j;
}

eval_result eval_npy(const std::string& input, backend& be, const eval_options& o) {
  return eval(parse_dataset_spec(input), be, o);
}

eval_result eval(const dataset_spec& input, backend& be, const eval_options& o) {
  check_threads(o.threads, "eval_options");
  if (!(o.min_seconds >= 0 && o.min_seconds <= 3600)) {  // (NaN too)
    throw error(errc::invalid_argument, "eval_options::min_seconds " +
                                            g_text(o.min_seconds) +
                                            ": expected 0 (one pass a chunk) to 3600");
  }
  input_source src =
      open_input(read_with_threads_of(be, input, o.threads), o.lay, o.nonfinite_replacement);
  std::vector<std::string> notes;
  if (!src.src->note().empty()) notes.push_back(src.src->note());
  if (auto n = one_image_note(src, o.lay); !n.empty()) notes.push_back(std::move(n));
  if (auto n = narrow_planes_note(src, o.lay); !n.empty()) notes.push_back(std::move(n));
  const geometry& g = src.geom;
  const u64 ibps = src.bytes_per_sample;

  struct combo {
    eval_row row;
    codec_params p;
    quality_accumulator acc;
    double timed = 0;  // seconds of every pass, repeats included (eval_options::min_seconds)
  };
  std::vector<combo> combos;
  std::optional<double> range;
  // SSIM needs float data's range up front; PSNR takes it from the values at the end.
  if (is_float(src.type) && o.ssim) {
    range = float_range(input, o.lay, o.nonfinite_replacement, o.progress);
  }
  const double offset = codec_offset(src, o.offset);
  const int largest_block = o.blocks.empty() ? 8 : *std::max_element(o.blocks.begin(), o.blocks.end());
  // Of the coefficient types tried, the one with the fewest significant bits.
  coeff_type coarsest = o.coeffs.empty() ? default_coeff_type(src.type, largest_block) : o.coeffs.front();
  for (coeff_type c : o.coeffs)
    if (significant_bits(c) < significant_bits(coarsest)) coarsest = c;
  if (auto n = far_offset_note(src, o.offset, offset, largest_block, coarsest); !n.empty()) {
    notes.push_back(std::move(n));
  }
  for (int b : o.blocks) {
    std::vector<coeff_type> coeffs = o.coeffs;
    if (coeffs.empty()) coeffs.push_back(default_coeff_type(src.type, b));
    for (auto ct : coeffs) {
      for (int k : o.chops) {
        if (k > b) continue;  // e.g. the default list 1,2,4,6 at block 4
        codec_params p{b, k, ct, offset};
        validate(p);
        eval_row row;
        row.block = b;
        row.chop = k;
        row.coeff = ct;
        row.input_bytes = g.samples * ibps;
        row.values = g.samples * g.values_per_sample();
        combos.push_back({row, p, quality_accumulator(src.type, range, o.ssim)});
      }
    }
  }
  if (combos.empty()) throw error(errc::invalid_argument, "eval: no chop to try");
  samples_per_chunk(1, 1, o.chunk_mb, 1);  // validates chunk_mb

  // One pass over the input: every setting sees each chunk while it is in memory.
  u64 most_coeffs = 0;  // bytes per sample of the setting that keeps the most
  for (const auto& c : combos) most_coeffs = std::max(most_coeffs, coeff_bytes_per_sample(c.p, g));
  // 64 MiB of input or of coefficients a chunk, whichever is larger (1x1 u8 planes at block
  // 8, chop 8, f16 take 128 coefficient bytes a value).
  const u64 spc = samples_within(u64(64) << 20, ibps, most_coeffs, g.samples);
  byte_buffer in, out, coeff_buf;
  allocate_for(src.name(), 1, spc, double(spc) * double(2 * ibps + most_coeffs), [&] {
    in = host_buffer(be, spc * ibps);
    out = host_buffer(be, spc * ibps);
    coeff_buf = host_buffer(be, spc * most_coeffs);
  });
  // Every page touched before any timing: the first setting would otherwise pay the first
  // touch of its output buffers (tens of MiB of page faults), and read several times slower
  // than the same setting run second.
  std::memset(out.data(), 0, out.size());
  std::memset(coeff_buf.data(), 0, coeff_buf.size());
  // The timed passes run as compress's workers run the codec: a chunk's samples in parts,
  // each on one thread (a single-threaded backend each), the caller's among them, no thread
  // waiting for another at a barrier. A pass of the backend's own threads (an OpenMP team)
  // waited at the team's barrier, beside another busy process, for the thread that shared a
  // core: a 12 MB pass read 0.8 GB/s where one thread read 2.5 and two 5.2.
  const std::vector<std::unique_ptr<backend>> crew =
      single_threaded_copies(be, std::numeric_limits<u64>::max());
  // Kept from the first pass in parts on, so that a pass does not start threads, nor their
  // first allocations map memory; none for data that never splits.
  std::optional<pass_crew> helpers;
  const auto helpers_for = [&]() -> pass_crew& {
    if (!helpers) helpers.emplace(crew.size() - 1);
    return *helpers;
  };
  // The codec over a chunk of n samples (in, coeffs and out): a chunk of 1 Mi values or more
  // in parts of 256 Ki values or more, up to 4 a thread (so that a helper that wakes late
  // still finds some), a thread's part a millisecond or so of one core's work; a smaller
  // chunk in the backend's own call.
  const auto parts_of = [&](u64 n) {
    if (crew.size() <= 1 || n * g.values_per_sample() < (u64(1) << 20)) return u64(1);
    return std::min<u64>({4 * static_cast<u64>(crew.size()), n, n * g.values_per_sample() >> 18});
  };
  const auto encode_all = [&](const codec_params& p, u64 n, std::span<std::byte> coeffs) {
    const u64 parts = parts_of(n), cbps = coeff_bytes_per_sample(p, g);
    if (parts <= 1) {
      return be.encode(p, make_view(g, src.type, static_cast<const void*>(in.data()), n), coeffs);
    }
    helpers_for().run(parts, [&](std::size_t i, std::size_t t) {
      const u64 a = n * i / parts, b = n * (i + 1) / parts;
      try {
        crew[t]->encode(p, make_view(g, src.type, static_cast<const void*>(in.data() + a * ibps),
                                     b - a),
                        coeffs.subspan(a * cbps, (b - a) * cbps));
      } catch (const error& e) {  // (the sample as the chunk numbers it)
        if (e.sample() < 0) throw;
        throw error(e.code(), e.detail(), e.sample() + static_cast<long long>(a));
      }
    });
  };
  const auto decode_all = [&](const codec_params& p, u64 n, std::span<const std::byte> coeffs) {
    const u64 parts = parts_of(n), cbps = coeff_bytes_per_sample(p, g);
    if (parts <= 1) {
      return be.decode(p, coeffs, make_view(g, src.type, static_cast<void*>(out.data()), n));
    }
    helpers_for().run(parts, [&](std::size_t i, std::size_t t) {
      const u64 a = n * i / parts, b = n * (i + 1) / parts;
      crew[t]->decode(p, coeffs.subspan(a * cbps, (b - a) * cbps),
                      make_view(g, src.type, static_cast<void*>(out.data() + a * ibps), b - a));
    });
  };
  u64 replaced = 0;
  quality_batch measured;  // a chunk's figures, where the backend measures on its device
  for (u64 first = 0; first < g.samples; first += spc) {
    const u64 n = std::min(spc, g.samples - first);
    replaced += src.read(first, n, in.data());
    const auto view = make_view(g, src.type, static_cast<const void*>(in.data()), n);
    if (first == 0) {
      // The first chunk through the codec once, untimed: the first call of a size pays for
      // the backend's scratch memory (the C library maps a large block afresh, page by page,
      // until one has been freed), which would otherwise count against the first setting
      // alone: 0.5 against 2.7 GB/s for the same setting run second.
      const auto& p = combos.front().p;
      const std::span<std::byte> coeffs(coeff_buf.data(), n * coeff_bytes_per_sample(p, g));
      try {
        encode_all(p, n, coeffs);
        decode_all(p, n, coeffs);
      } catch (const error&) {
        // (a setting that cannot hold the data: found, and reported, below)
      }
    }
    for (auto& c : combos) {
      if (!c.row.error.empty()) continue;
      // A chance to cancel between settings: with many settings of a chunk or two, Ctrl-C
      // waited for all of them (10 s and more), and then threw them away.
      if (o.progress) o.progress(first, g.samples);
      const u64 cbps = coeff_bytes_per_sample(c.p, g);
      const std::span<std::byte> coeffs(coeff_buf.data(), n * cbps);
      // The chunk through the codec until the setting has been timed for min_seconds (its
      // first chunks, where the data is small: every pass gives the same bytes), and its
      // fastest pass counts: a pass of 2 ms varied from 1 to 5.4 GB/s between runs here,
      // as the scheduler took a thread away or not.
      double best_encode = 0, best_decode = 0;
      for (u64 pass = 0; pass < eval_options::max_passes; ++pass) {
        // (and a chance to cancel between passes: --min-time 60 held Ctrl-C for 16 s)
        if (pass > 0 && o.progress) o.progress(first, g.samples);
        auto t0 = clock_type::now();
        try {
          encode_all(c.p, n, coeffs);
        } catch (const error& e) {
          if (e.code() != errc::out_of_range) rethrow_in(e, *src.src, first);
          // this coefficient type cannot hold the data (or the replacement of its NaN):
          // which sample, as compress says (the first pass finds it: each gives the same)
          c.row.error = (e.sample() >= 0
                             ? "sample " + std::to_string(first + u64(e.sample())) + ": "
                             : std::string()) +
                        overflow_detail(e, c.p, src.nonfinite_replacement, view);
          break;
        }
        const double encode = seconds_since(t0);
        t0 = clock_type::now();
        decode_all(c.p, n, coeffs);
        const double decode = seconds_since(t0);
        best_encode = pass == 0 ? encode : std::min(best_encode, encode);
        best_decode = pass == 0 ? decode : std::min(best_decode, decode);
        ++c.row.passes;
        c.timed += encode + decode;
        if (c.timed >= o.min_seconds) break;
      }
      if (!c.row.error.empty()) continue;
      c.row.encode_seconds += best_encode;
      c.row.decode_seconds += best_decode;
      // Measured on the device where the backend measures there: it decodes again, untimed,
      // rather than the host's cores measuring what came back (the SSIM of u8 RGB ran at a
      // fifth of the speed of one core's encode). The same figures, bit for bit.
      if (be.decode_measured(c.p, coeffs, view, c.acc, measured)) {
        c.acc.add(measured);
      } else {
        c.acc.add(view, make_view(g, src.type, static_cast<const void*>(out.data()), n), o.threads);
      }
    }
    if (o.progress) o.progress(first + n, g.samples);
  }

  eval_result res;
  res.geom = g;
  res.type = src.type;
  res.offset = offset;
  res.notes = std::move(notes);
  if (src.nonfinite_replacement) res.nonfinite_replaced = replaced;
  if (o.nonfinite_replacement && !is_float(src.type)) {
    res.warnings.push_back(nonfinite_on_integers_note(src.type));
  }
  for (auto& c : combos) {
    if (c.row.error.empty()) {
      try {
        c.row.q = c.acc.result();
      } catch (const error& e) {
        if (e.code() != errc::out_of_range) throw;
        c.row.error = e.detail();  // data too small to measure: refused as one a type cannot hold
        res.rows.push_back(c.row);
        continue;
      }
      // The header and footer compress would write (its timestamp has a fixed width).
      const archive_header h =
          make_archive_header(src, c.p, o.chunk_mb, o.tool_version, utc_text());
      c.row.archive_bytes = predict_archive_bytes(
          h, {}, footer_extra(c.row.input_bytes, &c.row.q, res.nonfinite_replaced));
    }
    res.rows.push_back(c.row);
  }
  if (res.nonfinite_replaced) {  // (the rows share R: the range of the data as replaced)
    for (const auto& row : res.rows) {
      if (!row.error.empty()) continue;
      auto note = replaced_values_note(*res.nonfinite_replaced, *o.nonfinite_replacement,
                                       offset, row.q.range);
      if (!note.empty()) res.warnings.push_back(std::move(note));
      break;
    }
  }
  {  // from the first row of each coefficient type that needs it
    std::vector<coeff_type> said;
    for (const auto& row : res.rows) {
      if (!row.error.empty() || std::find(said.begin(), said.end(), row.coeff) != said.end()) continue;
      if (auto note = coefficient_rounding_note(src.type, row.coeff, row.block, row.chop, row.q);
          !note.empty()) {
        res.warnings.push_back(std::move(note));
        said.push_back(row.coeff);
      }
    }
  }
  return res;
}

nlohmann::json check_archive(const std::string& archive, const progress_fn& progress) {
  archive_reader r = archive_reader::open(archive);
  const std::uint64_t chunks = read_to_end(r, progress);
  return {{"file", r.display_name()},
          {"archive", r.display_name()},  // (the key every command has)
          {"passed", true},
          {"chunks", chunks},
          {"side_arrays", side_arrays_json(r)},  // as info lists them
          {"samples", r.header().geom.samples},
          {"quality", nullptr},  // (the keys of verify --against, which measures and gates)
          {"failures", nlohmann::json::array()},
          {"notes", nlohmann::json::array()}};
}

nlohmann::json verify_result::to_json() const {
  nlohmann::json j;
  j["passed"] = passed();
  if (!mismatch.empty()) j["mismatch"] = mismatch;
  j["quality"] = q ? quality_to_json(*q) : nlohmann::json(nullptr);
  j["failures"] = failures;
  j["notes"] = notes;
  for (const auto& w : warnings) j["notes"].push_back(w);
  if (q) {
    j["samples"] = samples;
    j["chunks"] = chunks;
  }
  if (labels) {
    const auto number = [](const std::optional<std::uint64_t>& n) {
      return n ? nlohmann::json(*n) : nlohmann::json(nullptr);
    };
    j["labels"] = {{"source", labels->source},
                   {"rows", number(labels->rows)},
                   {"rows_differing", number(labels->rows_differing)}};
  }
  return j;
}

verify_result verify_archive(const std::string& archive, const std::string& input, backend& be,
                             const verify_options& o) {
  return verify_archive(archive, parse_dataset_spec(input), be, o);
}

verify_result verify_archive(const std::string& archive, const dataset_spec& input, backend& be,
                             const verify_options& o) {
  check_threads(o.threads, "verify_options");
  for (const auto& gate : {o.min_psnr, o.min_ssim, o.max_error}) {
    if (gate && !std::isfinite(*gate)) {  // (a NaN gate passed whatever was measured)
      throw error(errc::invalid_argument, "a verify gate must be a finite number");
    }
  }
  if (archive == "-" && input.path == "-") {
    throw error(errc::invalid_argument, "the archive and the input cannot both be stdin");
  }
  const std::optional<dataset_spec> labels_spec =
      o.labels_path.empty() ? std::nullopt : std::optional(parse_dataset_spec(o.labels_path));
  if (labels_spec && labels_spec->path == "-" && (archive == "-" || input.path == "-")) {
    throw error(errc::invalid_argument, std::string("the ") +
                                            (archive == "-" ? "archive" : "input") +
                                            " and --labels cannot both be stdin");
  }
  archive_reader r = archive_reader::open(archive);
  r.set_read_threads(read_threads_for(o.threads));
  const auto& h = r.header();
  verify_result res;
  const std::string holds = r.display_name() + " holds " + shape_text(h.geom.shape()) + " " +
                            std::string(to_string(h.type));
  // Errors in opening the input (a file to name a dataset of, say) are errors; a shape that
  // cannot have the archive's layout is a mismatch.
  input_source src = open_input_source(read_with_threads_of(be, input, o.threads), std::nullopt);
  if (!src.src->note().empty()) res.notes.push_back(src.src->note());
  // A mismatch of the data leaves the labels unread: said, so that a second run is not
  // needed to learn that they were not compared.
  const auto data_mismatch = [&](std::string why) {
    read_to_end(r, o.progress);  // every checksum still checked (corrupt: exit 4 before 9)
    res.mismatch = std::move(why);
    if (labels_spec) {
      res.labels = verify_result::labels_check{o.labels_path, std::nullopt, std::nullopt};
      res.notes.push_back("the labels " + o.labels_path +
                          " were not compared: the data does not match");
    }
    return res;
  };
  try {
    apply_layout(src, h.geom.lay);
  } catch (const error& e) {
    if (e.code() != errc::invalid_argument) throw;
    std::string why = holds + " " + std::string(to_string(h.geom.lay)) + "; " + e.what();
    if (src.type != h.type) why += "; its values are " + std::string(to_string(src.type));
    return data_mismatch(std::move(why));
  }
  if (src.type != h.type || src.geom.shape() != h.geom.shape()) {
    return data_mismatch(holds + " but " + src.name() + " is " + shape_text(src.geom.shape()) +
                         " " + std::string(to_string(src.type)));
  }
  // The input as compressed: with the replacement of NaN and Inf that the header records
  // (which fits the dtype, being the archive's).
  if (is_float(src.type)) src.nonfinite_replacement = h.nonfinite_replacement;
  // The labels are opened now, so that a name that reads nothing is said before the decode;
  // compared after it, where a stream's labels are (after its last chunk).
  std::unique_ptr<sample_source> labels;
  if (labels_spec) {
    // (The input by its content, as compress takes it: data.nc:images is data.nc's array.)
    labels = open_labels(*labels_spec, resolve_by_content(input), src, "");
    if (!labels->note().empty()) res.notes.push_back(labels->note());
  }

  // R for float data: the range recorded at compression, else a first pass over a file.
  std::optional<double> range;
  if (is_float(h.type)) {
    const auto& f = r.footer();
    if (f.contains("quality") && f["quality"].contains("range") &&
        f["quality"]["range"].is_number()) {
      range = f["quality"]["range"].get<double>();
    } else {
      range = float_range(input, h.geom.lay, h.nonfinite_replacement, o.progress);
    }
  }
  quality_accumulator acc(h.type, range, true);
  const u64 ibps = src.bytes_per_sample;
  // Chunks stream through run_chunks(): the archive chunk (checksum checked) and the same
  // samples of the input are read on this thread, decoded and measured by the workers, and
  // the measurements summed in chunk order.
  struct slot_buffers {
    chunk_info info;
    byte_buffer coeffs, out;  // in the backend's host memory: it decodes from one into the other
    byte_buffer in;           // the original, for the measurement; likewise
    quality_batch measured;
  };
  const u64 slot_bytes =
      h.samples_per_chunk * (h.coeff_bytes_per_sample() + 2 * ibps + quality_batch::bytes_per_sample);
  const pipeline_workers crew =
      make_workers(be, slot_bytes, chunk_count(h.geom.samples, h.samples_per_chunk));
  std::vector<slot_buffers> slot(crew.slots());
  allocate_for(r.display_name(), slot.size(), h.samples_per_chunk,
               double(slot.size()) * double(slot_bytes), [&] {
                 for (auto& b : slot) {  // a chunk holds at most samples_per_chunk samples
                   b.coeffs = host_buffer(be, h.samples_per_chunk * h.coeff_bytes_per_sample());
                   b.out = host_buffer(be, h.samples_per_chunk * ibps);
                   // (where a backend measures on its device, the original goes there too)
                   b.in = host_buffer(be, h.samples_per_chunk * ibps);
                   b.measured.sse.reserve(h.samples_per_chunk);
                   if (acc.computes_ssim()) b.measured.ssim_sum.reserve(h.samples_per_chunk);
                 }
               });
  chunk_stages stages;
  stages.before_read = cancel_point(o.progress);
  std::atomic<bool> stop_reads{false};  // a failure: a read from a stalled pipe gives up
  stages.stop_reads = &stop_reads;
  u64 replaced = 0;  // NaN and Inf of the original, compared as the header's replacement
  const watch_reads<archive_reader> watch_archive(r, stages, r.display_name());
  const watch_reads<sample_source> watch_original(*src.src, stages, src.name());
  stages.read = [&](u64, std::size_t i) {
    slot_buffers& b = slot[i];
    if (!r.next_chunk(b.info, b.coeffs)) return false;
    ++res.chunks;
    b.in.resize(b.info.count * ibps);
    replaced += src.read(b.info.first, b.info.count, b.in.data());
    return true;
  };
  stages.work = [&](u64, std::size_t i, unsigned worker) {
    slot_buffers& b = slot[i];
    const u64 n = b.info.count;
    b.out.resize(n * ibps);
    decode_and_measure(*crew.be[worker], h.codec, b.coeffs,
                       make_view(h.geom, h.type, static_cast<const void*>(b.in.data()), n),
                       make_view(h.geom, h.type, static_cast<void*>(b.out.data()), n), acc,
                       crew.count() > 1 ? 1 : o.threads, b.measured);
    // A NaN or Inf in the original makes its squared error non-finite. Compress refuses such
    // data unless it replaces them, and then so does the reader here; so this original is
    // not what the archive was made from. Or the decoded values are not finite: coefficients
    // that no dctchop writer stores (NaN or Inf; ARCHIVE.md), and no figure to give.
    for (u64 k = 0; k < n; ++k) {
      if (std::isfinite(b.measured.sse[k])) continue;
      const u64 at = b.info.first + k;
      if (!all_finite(b.in.data() + k * ibps, h.geom.values_per_sample(), h.type)) {
        throw error(errc::bad_input,
                    src.name() + ": sample " + std::to_string(at) + " holds a NaN or Inf, which " +
                        r.display_name() +
                        " cannot have been made from (it was compressed without --nonfinite "
                        "replace=V)" +
                        (src.src->unwritten(at, true).empty()
                             ? ""
                             : "; " + src.src->unwritten(at, true)));
      }
      throw error(errc::corrupt,
                  r.display_name() + ": corrupt archive: sample " + std::to_string(at) +
                      " decodes to NaN or Inf values (its coefficients hold some, which "
                      "compress never writes)");
    }
  };
  u64 done = 0;
  stages.write = [&](u64, std::size_t i) {
    const slot_buffers& b = slot[i];
    acc.add(b.measured);
    done += b.info.count;
    if (o.progress) o.progress(done, h.geom.samples);
  };
  run_chunks(slot.size(), crew.count(), stages);
  for (const auto& s : r.side_arrays()) {
    if (!labels || s.name != "labels") r.verify_side_array(s.name);  // in pieces
  }
  if (labels) res.mismatch = labels_difference(r, *labels, res);  // (checks their checksum)
  if (replaced > 0) {  // (only where the header records a replacement: else an error above)
    const std::string v = g_text(*h.nonfinite_replacement);
    res.notes.push_back(src.name() + ": its " + std::to_string(replaced) + " NaN/Inf value" +
                        (replaced == 1 ? " was" : "s were") + " compared as " + v +
                        ", the replacement " + r.display_name() + " records (--nonfinite replace=" +
                        v + ")");
  }
  if (const auto made = r.nonfinite_replaced(); made && *made != replaced) {
    res.warnings.push_back(src.name() + " holds " + std::to_string(replaced) + " NaN/Inf value" +
                           (replaced == 1 ? "" : "s") + ", but the data " + r.display_name() +
                           " was made from held " + std::to_string(*made) + ": is " + src.name() +
                           " that data, unchanged?");
  }
  // R of float data is the original's max - min. The archive's recorded R stood in for it
  // (SSIM needs R while it accumulates); an original whose values span another range is not
  // the data the archive was made from (or was changed since): its figures take its own R,
  // as the formulas say, and the SSIM measured with the other R is not reported.
  const auto seen = acc.data_range();
  const bool other_range = is_float(h.type) && range && seen && *seen != *range;
  res.q = measured(acc, src.name(), other_range);
  res.samples = h.geom.samples;
  const quality& q = *res.q;
  if (other_range) {
    const auto [now, made] = apart(*seen, *range, 9);  // digits enough to read apart
    res.warnings.push_back(src.name() + "'s values span " + now + " (max - min), but the data " +
                           r.display_name() + " was made from spanned " + made + ": is " +
                           src.name() + " that data, unchanged?");
  } else if (auto note = recorded_quality_note(r.footer(), q, r.display_name(), src.name());
             !note.empty()) {
    res.warnings.push_back(std::move(note));
  }
  if (o.min_psnr) {
    if (q.psnr_undefined) {
      res.failures.push_back("PSNR is undefined: the data is constant (range 0), so "
                             "--min-psnr cannot hold");
    } else if (q.psnr_db && !(*q.psnr_db >= *o.min_psnr)) {  // (a NaN fails)
      const auto [v, gate] = apart(*q.psnr_db, *o.min_psnr, 5);
      res.failures.push_back("PSNR " + v + " dB is below --min-psnr " + gate);
    }
  }
  if (o.min_ssim) {
    if (!q.ssim) {
      res.failures.push_back(std::string("SSIM is undefined: ") +
                             ssim_missing_reason(q.ssim_state) + "; --min-ssim cannot hold");
    } else if (!(*q.ssim >= *o.min_ssim)) {  // (a NaN fails)
      const auto [v, gate] = apart(*q.ssim, *o.min_ssim, 5);
      res.failures.push_back("SSIM " + v + " is below --min-ssim " + gate);
    }
  }
  if (o.max_error && q.max_abs_error > *o.max_error) {
    const auto [v, gate] = apart(q.max_abs_error, *o.max_error, 4);
    res.failures.push_back("max abs error " + v + " exceeds --max-error " + gate);
  }
  return res;
}

}  // namespace dctchop::formats
