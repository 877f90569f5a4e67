#include "dctchop/formats/pipeline.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <optional>
#include <future>
#include <vector>

#include "dctchop/cores.hpp"
#include "dctchop/detail/scalar.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/npy.hpp"
#include "chunk_pipeline.hpp"
#include "pipeline_util.hpp"
#include "zip_writer.hpp"

namespace dctchop::formats {
namespace detail {

namespace {

/** NaN and Inf in v[0..n) replaced by `with` (which open_input checked fits T); f16 values,
 *  half_value, are tested and replaced through float. */
template <typename T>
u64 replace_nonfinite(T* v, u64 n, double with) {
  u64 replaced = 0;
  for (u64 i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      v[i] = static_cast<T>(with);
      ++replaced;
    }
  }
  return replaced;
}

template <typename T>
bool finite_values(const T* v, u64 n) {
  for (u64 i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

}  // namespace

bool all_finite(const void* p, u64 values, dtype type) {
  switch (type) {  // (as input_source::read replaces them: f16 through half_value)
    case dtype::f16:
      return finite_values(static_cast<const dctchop::detail::half_value*>(p), values);
    case dtype::f32: return finite_values(static_cast<const float*>(p), values);
    case dtype::f64: return finite_values(static_cast<const double*>(p), values);
    default: return true;
  }
}

u64 input_source::read(u64 first, u64 n, void* dst) {
  const u64 rps = rows_per_sample(geom);
  if (head_pending_ && first == 0 && n > 0) {
    // A stream's sample 0 was read ahead: hand it over, then go on from sample 1.
    std::memcpy(dst, head_.data(), head_.size());
    if (n > 1) src->read_rows(rps, (n - 1) * rps, static_cast<std::byte*>(dst) + head_.size());
    head_pending_ = false;
  } else {
    src->read_rows(first * rps, n * rps, dst);
  }
  if (!nonfinite_replacement) return 0;  // set only for float types (open_input)
  const u64 values = n * geom.values_per_sample();
  switch (type) {
    case dtype::f16:
      return replace_nonfinite(static_cast<dctchop::detail::half_value*>(dst), values,
                               *nonfinite_replacement);
    case dtype::f32:
      return replace_nonfinite(static_cast<float*>(dst), values, *nonfinite_replacement);
    default:
      return replace_nonfinite(static_cast<double*>(dst), values, *nonfinite_replacement);
  }
}

namespace {

/** "160.0 GiB", "27.0 MiB" (a limit such as ulimit -v refuses tens of MiB: not "0.0 GiB"). */
std::string memory_text(double bytes) {
  double amount = bytes / double(1 << 20);
  const char* unit = "MiB";
  for (const char* bigger : {"GiB", "TiB", "PiB", "EiB"}) {
    if (amount < 1024) break;
    amount /= 1024;
    unit = bigger;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.1f %s", amount, unit);
  return text;
}

}  // namespace

void refuse_memory(const std::string& name, u64 chunks, u64 samples, double bytes) {
  const std::string what = name + ": " + std::to_string(chunks) +
                           (chunks == 1 ? " chunk of " : " chunks of ") + std::to_string(samples) +
                           (samples == 1 ? " sample needs " : " samples need ") +
                           memory_text(bytes) + " of memory";
  // One sample past the machine's memory is the data's size: nothing else helps (exit 3).
  // Otherwise the memory was there to be had, and the system or the process's limits
  // refused it: a resource, as a thread that does not start (exit 5).
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double physical = pages > 0 && page > 0 ? double(pages) * double(page) : 0;
  const double per_sample = bytes / (double(chunks) * double(std::max<u64>(samples, 1)));
  if (physical > 0 && per_sample > physical) {
    throw error(errc::bad_input, what + ", more than this machine has (" + memory_text(physical) +
                                     ")");
  }
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    throw error(errc::io, what + ", which the system refused: the process may have " +
                              memory_text(double(as.rlim_cur)) +
                              " of address space (ulimit -v), used in part already");
  }
  throw error(errc::io, what + ", which the system refused (out of memory)");
}

const std::vector<std::byte>& input_source::first_sample() {
  if (head_.empty() && geom.samples > 0) {
    allocate_for(name(), 1, 1, double(bytes_per_sample), [&] { head_.resize(bytes_per_sample); });
    src->read_rows(0, rows_per_sample(geom), head_.data());
    head_pending_ = !src->rereadable();
  }
  return head_;
}

namespace {

/** fn(x) for each value of the first sample as the codec gets it, as a double: a NaN or Inf
 *  as its --nonfinite replacement, or skipped without one. (A first sample all NaN, a masked
 *  tile, would otherwise leave an automatic offset of 0 beside data near the replacement.) */
template <typename Fn>
void for_each_first_value(input_source& src, Fn&& fn) {
  const auto& s = src.first_sample();
  if (s.empty()) return;
  const std::optional<double> replacement = src.nonfinite_replacement;
  // Plane by plane, whatever the layout: the same images as NHWC and as NCHW are then summed
  // in one order, and their mean (an f64 offset, kept to the last bit) is the same.
  const u64 planes = src.geom.planes, plane = src.geom.height * src.geom.width;
  const bool interleaved = src.geom.lay == layout::nhwc && planes > 1;
  auto each = [&](auto* v) {
    for (u64 c = 0; c < planes; ++c) {
      for (u64 i = 0; i < plane; ++i) {
        const double x = static_cast<double>(v[interleaved ? i * planes + c : c * plane + i]);
        if (std::isfinite(x)) {
          fn(x);
        } else if (replacement) {
          fn(*replacement);
        }
      }
    }
  };
  switch (src.type) {
    case dtype::u8: each(reinterpret_cast<const std::uint8_t*>(s.data())); break;
    case dtype::u16: each(reinterpret_cast<const std::uint16_t*>(s.data())); break;
    case dtype::i16: each(reinterpret_cast<const std::int16_t*>(s.data())); break;
    case dtype::f32: each(reinterpret_cast<const float*>(s.data())); break;
    case dtype::f64: each(reinterpret_cast<const double*>(s.data())); break;
    case dtype::f16: each(reinterpret_cast<const dctchop::detail::half_value*>(s.data())); break;
    case dtype::i8: each(reinterpret_cast<const std::int8_t*>(s.data())); break;
    case dtype::i32: each(reinterpret_cast<const std::int32_t*>(s.data())); break;
    case dtype::u32: each(reinterpret_cast<const std::uint32_t*>(s.data())); break;
  }
}

}  // namespace

double codec_offset(input_source& src, const offset_choice& choice) {
  using rule = offset_choice::rule;
  if (choice.how == rule::value) return choice.value;  // validate() refuses a non-finite one
  // auto: the dtype's offset for 8- and 16-bit integers; the first sample's mean for float
  // data and for i32 and u32, whose f32 coefficients hold 24 bits: counts near 0 lay 2^31
  // from u32's middle, a DC term of 2^34 stored to steps of 2^10 (errors of 64 at chop 8
  // where u16 was exact).
  if (choice.how == rule::automatic && !is_float(src.type) && !computes_in_double(src.type))
    return default_offset(src.type);
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  u64 count = 0;
  for_each_first_value(src, [&](double x) {
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    ++count;
  });
  if (count == 0) return 0.0;
  // A value of the type the transforms compute in, so that the header records what is
  // subtracted: double for f64, i32 and u32 data, float for the rest. (f64 data got the f32
  // rounding too, which is 1.3e7 away from a mean of 1e15: an error that every value carried,
  // 22.5 dB at chop 8 where the exact mean decodes losslessly.)
  // Among the values, as a mean is: a sum's rounding can put it outside them (ten values of
  // 1e100 summed to a mean 2e84 from each, farther than any coefficient type holds).
  const double mean = std::clamp(sum / static_cast<double>(count), lo, hi);
  if (computes_in_double(src.type)) return std::isfinite(mean) ? mean : 0.0;
  const float m = static_cast<float>(mean);
  return std::isfinite(m) ? static_cast<double>(m) : 0.0;
}

int significant_bits(coeff_type c) {
  return c == coeff_type::f16 ? 11 : c == coeff_type::bf16 ? 8 : 24;
}

std::string far_offset_note(input_source& src, const offset_choice& choice, double offset,
                            int block, coeff_type coeff) {
  if (choice.how != offset_choice::rule::value) return {};  // auto and mean lie among the values
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  u64 count = 0;
  for_each_first_value(src, [&](double x) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    ++count;
  });
  if (!(lo <= hi)) return {};
  // How far the values lie from the offset on the whole, against how far from their mean:
  // a block's error follows its mean's distance from the offset, so one saturated pixel
  // (which stretches lo..hi to all of u32) leaves the offset as costly for every other block.
  const double mean = sum / static_cast<double>(count);
  double from_offset = 0, from_mean = 0;
  for_each_first_value(src, [&](double x) {
    from_offset += std::fabs(x - offset);
    from_mean += std::fabs(x - mean);
  });
  // The transforms run in f32 (f64, i32 and u32 in double): a coefficient of size up to
  // B |x - o| carries a rounding error of about 2^-24 (2^-53) of that, which the decode
  // keeps. Stored, the first coefficient of a block (B times its mean) rounds to 24, 11 or 8
  // significant bits, an error that the inverse spreads over the block's values at 1/B each.
  const double dev = std::max(std::fabs(lo - offset), std::fabs(hi - offset));
  const int bits = significant_bits(coeff);
  const double computed = block * dev * std::ldexp(1.0, computes_in_double(src.type) ? -53 : -24);
  const bool stored = dev * std::ldexp(1.0, -bits) > computed;
  const double err = stored ? dev * std::ldexp(1.0, -bits) : computed;
  // Only an offset that costs more than the mean would: one amid values spread over all of
  // u32 does no worse than any (f32 coefficients cost full-range data that much anyway).
  const bool far = from_offset > 2 * from_mean;
  // Float values are held to their spread, or where the first sample is one value (a blank
  // image, a constant field) to its size: any error shows on data that does not vary.
  const double scale = hi > lo ? hi - lo : std::fabs(lo);
  const bool matters = far && (is_float(src.type) ? scale > 0 && err > 1e-3 * scale
                                                  : err > 0.25);
  if (!matters) return {};
  char cost[96];
  if (is_float(src.type)) {
    std::snprintf(cost, sizeof cost, "about %.2g (%.2g%% of their %s)", err, 100 * err / scale,
                  hi > lo ? "spread" : "size");
  } else {
    std::snprintf(cost, sizeof cost, "about %.2g", err);
  }
  const std::string why =
      stored ? std::string(to_string(coeff)) + " coefficients keep " + std::to_string(bits) +
                   " significant bits, which"
             : std::string("the transforms compute in ") +
                   (computes_in_double(src.type) ? "f64" : "f32") + ", whose precision";
  return "--offset " + g_text(offset) + " lies far from the values (the first sample's lie in [" +
         g_text(lo) + ", " + g_text(hi) + "]): " + why + " at |x - offset| up to " + g_text(dev) +
         " costs decode errors of " + cost + ", whatever the chop; --offset mean, or a value " +
         "among the data, avoids that";
}

input_source open_input(const dataset_spec& spec, layout lay, std::optional<double> replace) {
  input_source in = open_input_source(spec, replace);
  apply_layout(in, lay);
  return in;
}

input_source open_input_source(const dataset_spec& spec, std::optional<double> replace) {
  if (replace && !std::isfinite(*replace)) {
    throw error(errc::invalid_argument, "--nonfinite replace=V needs a finite V");
  }
  input_source in;
  in.spec = spec;
  in.nonfinite_replacement = replace;
  in.src = open_dataset(spec);
  const npy_dtype& t = in.src->type();
  const auto dt = t.codec_dtype();
  if (!dt) {
    throw error(errc::bad_input, in.name() + ": dtype " + t.numpy_name() +
                                     " is not supported; dctchop compresses " +
                                     k_dtype_numpy_names + " arrays (" + k_dtype_names +
                                     " in its own names)");
  }
  in.type = *dt;
  if (replace && is_float(in.type) && std::fabs(*replace) > max_finite(in.type)) {
    char bound[32], value[32];
    // The shortest texts that read back as the values (%g made 65504.01 "65504", which fits,
    // and f32's largest 3.40282e+38, below values that fit).
    *std::to_chars(bound, bound + sizeof bound - 1, max_finite(in.type)).ptr = '\0';
    *std::to_chars(value, value + sizeof value - 1, *replace).ptr = '\0';
    throw error(errc::invalid_argument, in.name() + ": --nonfinite replace=" + value +
                                            " does not fit " +
                                            std::string(to_string(in.type)) +
                                            " (whose finite values lie within +-" + bound + ")");
  }
  if (!is_float(in.type)) in.nonfinite_replacement.reset();  // integers hold no NaN or Inf
  return in;
}

void apply_layout(input_source& in, layout lay) {
  try {
    in.geom = resolve_layout(in.src->shape(), lay);
  } catch (const error& e) {
    throw error(e.code(), in.name() + ": " + e.what());
  }
  // The archive's limits that hold whatever the codec (make_archive_header checks the rest):
  // no size computed below wraps.
  if (const std::string why = archive_limit_passed(in.geom, nullptr); !why.empty()) {
    throw error(errc::bad_input, in.name() + ": shape " + shape_text(in.src->shape()) +
                                     " is too large for an archive: " + why);
  }
  in.bytes_per_sample = in.geom.values_per_sample() * size_of(in.type);
}

u64 samples_per_chunk(u64 cbps, u64 ibps, double chunk_mb, u64 samples, u64 preferred) {
  if (!(chunk_mb > 0) || chunk_mb > 4096) {
    throw error(errc::invalid_argument, "--chunk-mb must be in (0, 4096]");
  }
  // Chunk size is set by the coefficient bytes; the input buffer is capped too, so that a
  // strong chop (K=1: 32x) does not make the input side of a chunk huge.
  const u64 target = static_cast<u64>(chunk_mb * 1048576.0);
  u64 spc = std::max<u64>(1, target / cbps);
  spc = std::max<u64>(1, std::min<u64>(spc, (u64(64) << 20) / ibps));
  if (preferred > 1 && spc >= preferred) spc = spc / preferred * preferred;
  return std::min<u64>(spc, samples);
}

/** "; use a smaller block or chop", naming only what can be smaller (block 4 and chop 1
 *  are the least), or what is left to do at the least. */
std::string smaller_setting(const codec_params& c) {
  if (c.block > 4 && c.chop > 1) return "; use a smaller block or chop";
  if (c.block > 4) return "; use a smaller block";
  if (c.chop > 1) return "; use a smaller chop";
  return " (block 4, chop 1: the least there is); planes this small do not shrink";
}

std::vector<std::unique_ptr<backend>> single_threaded_copies(backend& be, u64 most) {
  // No more workers than the CPUs this process may run on (its affinity mask), as for the
  // codec's parallel steps (region_threads): a worker only computes, so more would take turns
  // on them, each with a chunk's buffers (--threads 4096 on 2 CPUs started 600 workers, in
  // 334 MB where 2 took 35).
  const u64 cpus = std::max(usable_cores().affinity, 1U);
  const u64 want = std::min<u64>({static_cast<u64>(std::max(be.threads(), 1)), most, cpus});
  std::vector<std::unique_ptr<backend>> copies;
  for (u64 i = 0; want > 1 && i < want; ++i) {
    auto one = be.single_threaded();
    if (!one) break;
    copies.push_back(std::move(one));
  }
  if (copies.size() <= 1) copies.clear();
  return copies;
}

pipeline_workers make_workers(backend& be, u64 slot_bytes, u64 chunks) {
  constexpr u64 budget = u64(384) << 20;
  const u64 fit = budget / std::max<u64>(slot_bytes, 1);
  const u64 most = std::min<u64>(fit > 3 ? fit - 2 : 1, std::max<u64>(chunks, 1));
  pipeline_workers crew;
  crew.owned = single_threaded_copies(be, most);
  for (const auto& one : crew.owned) crew.be.push_back(one.get());
  if (crew.be.empty()) crew.be.assign(1, &be);
  // A chunk of one huge sample (a 512^3 f32 volume): as many in flight as the budget holds,
  // down to one at a time, rather than three of them.
  crew.slot_count = fit >= 3 ? crew.be.size() + 2 : static_cast<std::size_t>(std::max<u64>(fit, 1));
  return crew;
}

std::optional<double> float_range(const dataset_spec& spec, layout lay,
                                  std::optional<double> replace, const progress_fn& progress) {
  if (reads_as_stream(spec.path)) return std::nullopt;  // (opening it again would take its data)
  input_source s = open_input(spec, lay, replace);
  if (!is_float(s.type) || !s.rereadable()) return std::nullopt;
  const u64 n = s.geom.samples;
  const u64 spc = std::max<u64>(1, std::min<u64>(n, (u64(32) << 20) / s.bytes_per_sample));
  std::vector<std::byte> buf;
  allocate_for(s.name(), 1, spc, double(spc) * double(s.bytes_per_sample),
               [&] { buf.resize(spc * s.bytes_per_sample); });
  value_range vr;
  for (u64 first = 0; first < n; first += spc) {
    const u64 k = std::min(spc, n - first);
    s.read(first, k, buf.data());
    vr.add(make_view(s.geom, s.type, static_cast<const void*>(buf.data()), k));
    if (progress) progress(0, n);  // (a chance to cancel)
  }
  return vr.empty ? std::nullopt : std::optional<double>(vr.max - vr.min);
}

std::string utc_text(std::optional<std::int64_t> seconds) {
  const std::time_t t = seconds ? static_cast<std::time_t>(*seconds) : std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

archive_header make_archive_header(const input_source& src, const codec_params& p,
                                   double chunk_mb, const std::string& tool_version,
                                   const std::string& created) {
  const geometry& g = src.geom;
  if (const std::string why = archive_limit_passed(g, &p); !why.empty()) {
    throw error(errc::bad_input, src.name() + ": shape " + shape_text(src.src->shape()) +
                                     " is too large for an archive at block " +
                                     std::to_string(p.block) + ", chop " + std::to_string(p.chop) +
                                     ", " + std::string(to_string(p.coeff)) + ": " + why);
  }
  archive_header h;
  h.type = src.type;
  h.geom = g;
  h.codec = p;
  h.samples_per_chunk =
      samples_per_chunk(coeff_bytes_per_sample(p, g), src.bytes_per_sample, chunk_mb, g.samples,
                        g.lay == layout::hw ? 1 : src.src->preferred_rows());
  h.nonfinite_replacement = src.nonfinite_replacement;
  h.provenance = {{"tool", "dctchop " + tool_version},
                  {"created", created},
                  {"source", src.name()},  // names the dataset even when dctchop chose it
                  {"source_bytes", g.samples * src.bytes_per_sample}};
  return h;
}

std::string overflow_detail(const error& e, const codec_params& p,
                            std::optional<double> replacement, const const_sample_view& view) {
  const long long sample = e.sample();
  if (e.code() != errc::out_of_range || !replacement || sample < 0 ||
      u64(sample) >= view.samples || (view.type != dtype::f32 && view.type != dtype::f64)) {
    return e.detail();
  }
  // |C[u][v]| <= B * max |x - offset| (cpu_backend's bound): the sample's other values within
  // the type among themselves (an offset amid them), the replacement past it from them.
  const double largest = max_finite(p.coeff);
  const double v = view.type == dtype::f32 ? double(float(*replacement)) : *replacement;
  bool there = false;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (u64 c = 0; c < view.planes; ++c)
    for (u64 y = 0; y < view.height; ++y)
      for (u64 x = 0; x < view.width; ++x) {
        const std::int64_t at =
            sample * view.stride_sample + std::int64_t(c) * view.stride_plane +
            std::int64_t(y) * view.stride_row + std::int64_t(x) * view.stride_col;
        const double value = view.type == dtype::f32
                                 ? double(static_cast<const float*>(view.data)[at])
                                 : static_cast<const double*>(view.data)[at];
        if (value == v) {
          there = true;
        } else {
          lo = std::min(lo, value);
          hi = std::max(hi, value);
        }
      }
  if (!there || !(lo <= hi) || !(p.block * (hi - lo) <= largest) ||
      !(p.block * (std::max(hi, v) - std::min(lo, v)) > largest)) {
    return e.detail();
  }
  const auto exact = [](double x) {  // the shortest text that reads back as x
    char t[32];
    *std::to_chars(t, t + sizeof t - 1, x).ptr = '\0';
    return std::string(t);
  };
  // (Values of the data's own may equal the replacement: which ones were NaN is not known
  // here, so the words say both.)
  const std::string type(to_string(p.coeff));
  return "a DCT coefficient does not fit " + type +
         ": the sample's values equal to the --nonfinite replacement " + exact(*replacement) +
         " (its NaN and Inf, if it held some) lie too far from its others (within [" + exact(lo) +
         ", " + exact(hi) + "]) for " + type +
         " to hold a block of both; where they are NaN and Inf, a replacement among the others "
         "fits";
}

void rethrow_in(const error& e, const sample_source& src, u64 first) {
  const std::string file = src.name();
  if (e.sample() >= 0) {
    // (A NaN or Inf: cpu_backend's words, and the original's in quality_tools.)
    const bool nonfinite = e.detail().starts_with("holds a NaN or Inf");
    const std::string unwritten = src.unwritten(first + u64(e.sample()), nonfinite);
    throw error(e.code(), file + ": sample " + std::to_string(first + u64(e.sample())) + ": " +
                              e.detail() + (unwritten.empty() ? "" : "; " + unwritten));
  }
  throw error(e.code(), file + ": " + e.what());
}

nlohmann::json footer_extra(u64 input_bytes, const quality* q, std::optional<u64> replaced) {
  nlohmann::json extra = {{"input_bytes", input_bytes}};
  if (q != nullptr) {
    extra["quality"] = quality_to_json(*q);
    // Readers of format 1.0 take only numbers, flags and nulls there (ARCHIVE.md): the
    // reports' one word stays out, so that every 1.0 reader opens what this one writes.
    extra["quality"].erase("ssim_status");
  }
  if (replaced) extra["nonfinite_replaced"] = *replaced;
  return extra;
}

bool meets(const quality& q, const quality_target& t, const std::string& name) {
  bool ok = true;
  if (t.psnr_db) {
    if (q.psnr_undefined) {
      throw error(errc::quality_not_met,
                  name + ": the data is constant (range 0), so PSNR is undefined and --psnr "
                         "cannot choose a chop; give --chop instead");
    }
    ok &= q.mse == 0 || (q.psnr_db && *q.psnr_db >= *t.psnr_db);
  }
  if (t.ssim) {
    if (!q.ssim) {
      throw error(errc::quality_not_met, name + ": --ssim cannot choose a chop: " +
                                             ssim_missing_reason(q.ssim_state));
    }
    ok &= *q.ssim >= *t.ssim;
  }
  return ok;
}

std::string g_text(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

namespace {

/** The step between a coefficient type's values near zero: i16's 1, and the float types'
 *  smallest (subnormal) steps, f16 2^-24, bf16 2^-133, f32 2^-149. A coefficient that small
 *  keeps no relative precision: it rounds to a multiple of the step. */
double smallest_step(coeff_type c) {
  switch (c) {
    case coeff_type::i16: return 1.0;
    case coeff_type::f16: return 0x1p-24;
    case coeff_type::bf16: return 0x1p-133;
    case coeff_type::f32: return 0x1p-149;
  }
  return 0.0;
}

/** Whether rounding coefficients to steps of smallest_step(c) can be a good part (a tenth or
 *  more) of the measured error: the mean squared error per value it can add, at most, when
 *  each kept coefficient errs by up to half a step (variance step^2/12 when uniform) and the
 *  orthonormal inverse spreads the K*K errors of a block over its B*B values. */
bool rounding_matters(coeff_type c, int block, int chop, const quality& q) {
  const double step = smallest_step(c);
  const double mse = double(chop) * chop / (double(block) * block) * step * step / 12.0;
  return q.range > 0 && q.mse > 0 && mse > 0.1 * q.mse;  // (an exact result needs no note)
}

}  // namespace

std::string coefficient_rounding_note(dtype type, coeff_type coeff, int block, int chop,
                                      const quality& q) {
  if (!rounding_matters(coeff, block, chop, q)) return {};
  if (!is_float(type)) {
    // (The float types' steps near zero are no matter for whole numbers; their steps among
    // large coefficients are, but those are the transform's own precision.)
    if (coeff != coeff_type::i16) return {};
    const bool narrow = size_of(type) == 1;
    return "i16 rounds every coefficient to a whole number (an error of up to 0.5 each): at "
           "chop " + std::to_string(chop) + " that rounding is a good part of the error of " +
           std::string(to_string(type)) + " data (values off by one" +
           (chop == block ? ", where chop " + std::to_string(chop) +
                                " keeps every coefficient" : std::string()) +
           "); " + (narrow ? "f16 or f32 keep" : "f32 keeps") + " more of the detail";
  }
  // (No figure for the rounding's own PSNR: coefficients much smaller than the step err by
  // less than the uniform step^2/12, and a bound the measured PSNR beats reads as a
  // contradiction.)
  std::vector<std::string> better;
  for (coeff_type t : {coeff_type::f32, coeff_type::f16, coeff_type::bf16}) {
    // (Finer steps than coeff's, and rounding that would not matter at this error: such a
    // type keeps more of the detail, though at its own smaller error its rounding may still
    // be a good part, and its own note may then say so.)
    if (t == coeff || !(smallest_step(t) < smallest_step(coeff)) ||
        rounding_matters(t, block, chop, q))
      continue;
    better.push_back(std::string(to_string(t)) +
                     (t == coeff_type::f32 ? " (the default for float input)" : ""));
  }
  std::string keep;
  for (std::size_t i = 0; i < better.size(); ++i) {
    keep += (i == 0 ? "" : i + 1 == better.size() ? " or " : ", ") + better[i];
  }
  keep = better.empty() ? "no coefficient type keeps more of the detail of values this small: "
                          "scale the data up before compressing"
                        : keep + " keep" + (better.size() == 1 ? "s" : "") + " more of the detail";
  char step[32];
  std::snprintf(step, sizeof step, "%.2g", smallest_step(coeff));
  const std::string what =
      coeff == coeff_type::i16
          ? "i16 rounds every coefficient to a whole number (an error of up to 0.5 each)"
          : std::string(to_string(coeff)) + " holds coefficients near zero only to steps of " +
                step + " (its smallest numbers)";
  return what + ", coarse next to float data of range " + g_text(q.range) + ": at chop " +
         std::to_string(chop) + " that rounding can be a good part of the error; " + keep;
}

std::string one_image_note(const input_source& src, layout asked) {
  if (asked != layout::automatic || src.geom.lay != layout::hw) return {};
  const u64 h = src.geom.height, w = src.geom.width;
  std::string hint;
  // Flattened images (MNIST's 784 values a row) read as one tall image; say how to fix it.
  const auto side = static_cast<u64>(std::llround(std::sqrt(double(w))));
  if (side >= 4 && side * side == w && h > 1) {
    hint = "; if its rows are flattened " + std::to_string(side) + "x" + std::to_string(side) +
           " images, reshape it to (" + std::to_string(h) + ", " + std::to_string(side) + ", " +
           std::to_string(side) + ") first";
  }
  return src.name() + ": a 2-D array is one image (layout HW) of " + std::to_string(h) + "x" +
         std::to_string(w) + hint;
}

std::string narrow_planes_note(const input_source& src, layout asked) {
  const geometry& g = src.geom;
  if (asked == layout::automatic || (g.height > 4 && g.width > 4)) return {};
  geometry a;
  try {
    a = resolve_layout(g.shape(), layout::automatic);
  } catch (const error&) {
    return {};  // no other reading of the shape to offer
  }
  if (a.lay == g.lay || a.height <= 4 || a.width <= 4) return {};
  auto planes = [](const geometry& x) {
    return std::to_string(x.height) + "x" + std::to_string(x.width);
  };
  return src.name() + ": --layout " + std::string(to_string(asked)) + " makes planes of " +
         planes(g) + ", and an axis of 4 or fewer values is usually channels: --layout auto "
         "reads this shape as " + std::string(to_string(a.lay)) + ", planes of " + planes(a);
}

std::string replaced_values_note(u64 replaced, double value, double offset, double range) {
  // The figures compare with the input as stored, V in place of NaN/Inf: worth a word when V
  // lies far from the data: more than 0.6 R from the offset (the first sample's mean by
  // default), where a V amid the values is seldom.
  if (replaced == 0 || !(std::fabs(value - offset) > 0.6 * range)) return {};
  return "the quality figures count the " + std::to_string(replaced) + " replaced value" +
         (replaced == 1 ? "" : "s") + " as " + g_text(value) +
         ", and R spans it: a V far from the other values stretches R, which raises the "
         "PSNR, and where the chop drops its block's detail V spreads into the values around "
         "it, which lowers it; which wins depends on the data and the chop, and either way the "
         "figures then measure V more than the data (a V near the data's mean avoids both). A "
         "replaced place decodes to about " + g_text(value) + " only where the chop keeps its "
         "block's detail";
}

std::string nonfinite_on_integers_note(dtype type) {
  return "--nonfinite has no effect: " + std::string(to_string(type)) +
         " data holds no NaN or Inf";
}

namespace {

/** A note when compress writes its archive to a name that says another format. */
std::string archive_name_note(const std::string& out) {
  for (const char* ext : {".npy", ".npz", ".h5", ".hdf5", ".he5", ".hdf", ".raw", ".bin"}) {
    if (name_ends_with(out, ext)) {
      return out + " holds a dctchop archive, whatever its name says (archives are named .dcz; "
                   "decompress writes " + ext + " files)";
    }
  }
  return {};
}

}  // namespace

std::vector<std::string> compress_warnings(const compress_result& r, const std::string& output,
                                           std::optional<double> replacement) {
  std::vector<std::string> out;
  if (replacement && !is_float(r.type)) out.push_back(nonfinite_on_integers_note(r.type));
  if (r.q && replacement) {
    auto note = replaced_values_note(r.nonfinite_replaced.value_or(0), *replacement,
                                     r.codec.offset, r.q->range);
    if (!note.empty()) out.push_back(std::move(note));
  }
  if (output != "-") {
    if (auto note = archive_name_note(output); !note.empty()) out.push_back(std::move(note));
  }
  if (r.q) {
    auto note = coefficient_rounding_note(r.type, r.codec.coeff, r.codec.block, r.codec.chop, *r.q);
    if (!note.empty()) out.push_back(std::move(note));
  }
  if (r.archive_bytes > r.input_bytes) {
    const double coeff_ratio = double(r.codec.block * r.codec.block * size_of(r.type)) /
                               double(r.codec.chop * r.codec.chop * size_of(r.codec.coeff));
    const u64 coeff_bytes = coeff_bytes_per_sample(r.codec, r.geom);
    const u64 value_bytes = r.geom.values_per_sample() * size_of(r.type);
    const u64 b = static_cast<u64>(r.codec.block);
    // Chunks of few samples, each on a 4 KiB boundary (--chunk-mb 0.0001: 30000 chunks of one
    // sample, 0.06x), said with whatever else makes the archive larger.
    const bool padded = r.chunks > 1 && r.samples_per_chunk * coeff_bytes < 4096;
    const std::string padding =
        !padded ? std::string()
                : "its " + std::to_string(r.chunks) + " chunks of " +
                      std::to_string(r.samples_per_chunk) + " sample" +
                      (r.samples_per_chunk == 1 ? "" : "s") + " (" +
                      std::to_string(r.samples_per_chunk * coeff_bytes) +
                      " bytes of coefficients) each start on a 4 KiB boundary; a larger "
                      "--chunk-mb puts more samples into a chunk";
    const std::string and_padding = padded ? "; and " + padding : std::string();
    if (coeff_ratio <= 1) {  // (at 1, chop = block: no reduction, whatever the padding adds)
      out.push_back("the archive is larger than the input: " +
                    std::string(to_string(r.codec.coeff)) + " coefficients at chop " +
                    std::to_string(r.codec.chop) + " take " +
                    (coeff_ratio < 1 ? "more bytes than" : "as many bytes as") + " the " +
                    std::string(to_string(r.type)) + " values" +
                    (coeff_ratio < 1 ? "" : ", and the header and alignment add to them") +
                    "; use a smaller chop" +
                    (size_of(r.codec.coeff) > 2 ? " or a 2-byte coefficient type" : "") +
                    and_padding);
    } else if (coeff_bytes > value_bytes) {
      // Small planes: each is padded to whole blocks, and every block keeps K x K.
      const u64 ph = (r.geom.height + b - 1) / b * b, pw = (r.geom.width + b - 1) / b * b;
      out.push_back("the archive is larger than the input: planes of " +
                    std::to_string(r.geom.height) + "x" + std::to_string(r.geom.width) +
                    " are padded to whole " + std::to_string(b) + "x" + std::to_string(b) +
                    " blocks (" + std::to_string(ph) + "x" + std::to_string(pw) +
                    "), each of which keeps " + std::to_string(r.codec.chop) + "x" +
                    std::to_string(r.codec.chop) + " coefficients" + smaller_setting(r.codec) +
                    and_padding);
    } else if (padded) {
      out.push_back("the archive is larger than the input: " + padding);
    } else {
      out.push_back("the archive is larger than the input: for data this small the 4 KiB-aligned "
                    "header and chunks dominate");
    }
  }
  return out;
}

}  // namespace detail

std::optional<std::int64_t> parse_source_date_epoch(const char* value) {
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string s = value;
  if (s.find_first_not_of("0123456789") != std::string::npos) {
    throw error(errc::invalid_argument,
                "SOURCE_DATE_EPOCH=" + s + ": expected a whole number of seconds since 1970");
  }
  // The header's `created` is an RFC 3339 time, whose year has four digits: 999999999999
  // was written as the year 33658.
  constexpr std::int64_t last = 253402300799;  // 9999-12-31T23:59:59Z
  const auto digits = s.find_first_not_of('0');
  if (digits != std::string::npos &&
      (s.size() - digits > 12 || std::stoll(s.substr(digits)) > last)) {
    throw error(errc::invalid_argument, "SOURCE_DATE_EPOCH=" + s + ": after the year 9999 (at "
                                        "most 253402300799 seconds since 1970)");
  }
  return digits == std::string::npos ? 0 : std::stoll(s.substr(digits));
}

using namespace detail;

namespace {

nlohmann::json opt(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

void check_not_same(const std::string& input, const std::string& output) {
  if (input == output && input != "-") {
    throw error(errc::invalid_argument, output + ": the output would replace the input");
  }
  if (same_file(input, output)) {
    throw error(errc::invalid_argument,
                output + ": is the same file as " +
                    (input == "-" ? std::string("standard input, the input") : "the input " + input));
  }
  if (output == "-" && is_standard_output(input)) {
    throw error(errc::invalid_argument,
                "standard output is the input file " + (input == "-" ? "(standard input's)" : input) +
                    ": the output would replace it");
  }
}

/** An output that is a file that reading `spec`'s HDF5 dataset `dataset` (as opened: the
 *  one chosen where none was named) reads besides `spec.path`, which counts as an input too:
 *  compress -o target.h5 -f of ext.h5:/images, an external link to it, replaced the data. */
void check_not_read_by(const dataset_spec& spec, const std::string& dataset,
                       const std::string& name, const std::string& output) {
  if (spec.kind != file_kind::hdf5 || spec.memory || dataset.empty()) return;
  dataset_spec d = spec;
  d.dataset = dataset;
  for (const auto& f : files_read_by(d)) {
    if (same_file(f, output) || (output == "-" && is_standard_output(f))) {
      const std::string why = f + ", which the input " + name +
                              " reads (an external link's target, external raw data or a "
                              "virtual dataset's source): the output would replace it";
      throw error(errc::invalid_argument,
                  output == "-" ? "standard output is " + why : output + ": is " + why);
    }
  }
}

/** measured(), for compress: data too small to measure (out_of_range) cannot meet a --psnr
 *  or --ssim target, exit 8 ("...; so --psnr and --ssim " + `cannot`), and without one
 *  (`cannot` null) may be compressed unmeasured, as the message adds. */
quality measured_for_target(const quality_accumulator& acc, const std::string& name,
                            const char* cannot) {
  try {
    return measured(acc, name);
  } catch (const error& e) {
    if (e.code() != errc::out_of_range) throw;
    if (cannot != nullptr) {
      throw error(errc::quality_not_met,
                  std::string(e.what()) + "; so --psnr and --ssim " + cannot);
    }
    throw error(e.code(), std::string(e.what()) + ", or compress it unmeasured (--no-quality)");
  }
}

std::string fmt_db(const std::optional<double>& v) {
  if (!v) return "inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", *v);
  return b;
}

/** "NAME: even chop B (every coefficient) gives PSNR X dB (target T) WHERE, short of the
 *  target; try ...": the figures of the targets given, as measured at chop B. */
std::string unreachable_text(const std::string& name, const codec_params& p, const quality& q,
                             const quality_target& t, const std::string& where) {
  char b[96];
  std::string figures;
  if (t.psnr_db) {
    std::snprintf(b, sizeof b, "PSNR %s dB (target %g)", fmt_db(q.psnr_db).c_str(), *t.psnr_db);
    figures = b;
  }
  if (t.ssim) {
    if (q.ssim) {
      char v[32], w[32];
      std::snprintf(v, sizeof v, "%.10g", *q.ssim);
      std::snprintf(w, sizeof w, "%.10g", *t.ssim);
      if (std::strcmp(v, w) == 0) {  // (0.9999999999999358 against 1 read "SSIM 1 (target 1)")
        std::snprintf(v, sizeof v, "%.17g", *q.ssim);
        std::snprintf(w, sizeof w, "%.17g", *t.ssim);
      }
      std::snprintf(b, sizeof b, "SSIM %s (target %s)", v, w);
    }
    figures += (figures.empty() ? "" : ", ") + (q.ssim ? std::string(b) : std::string("no SSIM"));
  }
  return name + ": even chop " + std::to_string(p.block) + " (every coefficient) gives " +
         figures + where + ", short of the target" +
         (p.coeff != coeff_type::f32 ? std::string("; try --coeff f32")
                                     : std::string("; f32 coefficients are the most precise "
                                                   "dctchop stores"));
}

/** Runs of consecutive samples that a target search reads (all the data: one). */
constexpr u64 k_search_runs = 64;

/** Measure chops 1..B on a sample of the data (at most `bytes` of input: all of it, or
 *  k_search_runs evenly spaced runs of consecutive samples) and return the trials up to the
 *  first that meets the target. The sample is coded in pieces of at most `bytes` of
 *  coefficients at chop B too: tiny planes pad to whole blocks, and their coefficients can
 *  outweigh the input many times (a sample cut to fit those measured a quarter of a 128 KiB
 *  input of 2x2 planes at block 32, and chose a larger chop than the data needed). */
std::vector<chop_trial> search_on_sample(input_source& src, backend& be, codec_params p,
                                         std::optional<double> range, const quality_target& t,
                                         bool ssim, int threads, u64 bytes,
                                         const progress_fn& progress,
                                         const std::function<void(const chop_trial&)>& on_trial) {
  const u64 n = src.geom.samples, ibps = src.bytes_per_sample;
  codec_params all = p;
  all.chop = p.block;  // the most coefficients of any chop tried
  const u64 most = coeff_bytes_per_sample(all, src.geom);
  const u64 m = samples_within(bytes, ibps, 0, n);
  // (and the measurements' 16 bytes a sample, which outweigh 1x1 planes at chop 1)
  const u64 piece = samples_within(bytes, ibps, most + quality_batch::bytes_per_sample, m);
  byte_buffer in, out, coeffs;
  allocate_for(src.name(), 1, m, double(m) * double(ibps) + double(piece) * double(ibps + most), [&] {
    in = host_buffer(be, m * ibps);
    out = host_buffer(be, piece * ibps);
    coeffs = host_buffer(be, piece * most);
  });
  // Runs of consecutive samples, evenly spaced: a chunked, compressed HDF5 dataset decodes
  // each chunk a read touches, so one sample per read decoded its chunks once per sample
  // (130 times the data, for h5py's default chunks of 750 samples).
  const u64 runs = std::min<u64>(m, k_search_runs);
  for (u64 r = 0; r < runs; ++r) {
    // Run r: samples r n/runs on, as many as its share of m (all the data when m = n).
    const u64 at = r * m / runs, len = (r + 1) * m / runs - at;
    src.read(r * n / runs, len, in.data() + at * ibps);
    if (progress) progress(0, n);  // a chance to cancel between reads
  }
  std::vector<chop_trial> trials;
  quality_batch figures;  // a piece's, before they are added
  for (int k = 1; k <= p.block; ++k) {
    p.chop = k;
    quality_accumulator acc(src.type, range, ssim);
    for (u64 first = 0; first < m; first += piece) {
      const u64 c = std::min(piece, m - first);
      const auto view = make_view(src.geom, src.type,
                                  static_cast<const void*>(in.data() + first * ibps), c);
      const std::span<std::byte> kept(coeffs.data(), c * coeff_bytes_per_sample(p, src.geom));
      encode_batch(be, p, view, kept, src, first);
      decode_and_measure(be, p, kept, view,
                         make_view(src.geom, src.type, static_cast<void*>(out.data()), c), acc,
                         threads, figures);
      acc.add(figures);
      if (progress && first + c < m) progress(0, n);  // (a chance to cancel)
    }
    chop_trial tr{k, measured_for_target(acc, src.name(), "cannot choose a chop: give --chop"),
                  m < n, false};
    tr.meets = meets(tr.q, t, src.name());
    trials.push_back(tr);
    if (on_trial) on_trial(tr);
    if (tr.meets) return trials;
    if (progress) progress(0, n);  // (a chance to cancel)
  }
  // Short of the target at chop B on a sample: the whole dataset may not be (the caller
  // compresses it at chop B and says whether it is).
  if (m < n) return trials;
  throw error(errc::quality_not_met,
              unreachable_text(src.name(), p, trials.back().q, t,
                               m < n ? " on a sample of " + std::to_string(m) + " of " +
                                           std::to_string(n) + " samples"
                                     : std::string(" on all the data")));
}

}  // namespace

namespace detail {

std::unique_ptr<sample_source> open_labels(dataset_spec spec, const dataset_spec& input,
                                           const input_source& src, const std::string& output) {
  spec = resolve_by_content(spec);  // (an array in memory stays as it is)
  spec.purpose = dataset_spec::role::labels;
  const bool data_file = !spec.memory && same_file(spec.path, input.path);
  if ((spec.kind == file_kind::hdf5 || spec.kind == file_kind::npz) && spec.dataset.empty() &&
      data_file) {
    spec.not_this = src.src->dataset_path();  // the images are not their own labels
  }
  // A search takes only labels of one row per sample: of the whole dataset, where a range
  // (--samples) takes part of it; the labels then take the same range, below.
  const u64 rows_wanted = input.has_row_range() ? src.src->whole_rows() : src.geom.samples;
  spec.rows = rows_wanted;
  spec.first_row = 0;
  spec.end_row.reset();
  if (!output.empty() && !spec.memory &&
      ((spec.path == output && output != "-") || same_file(spec.path, output) ||
       (output == "-" && is_standard_output(spec.path)))) {
    throw error(errc::invalid_argument,
                output == "-" ? "standard output is the labels input file " + spec.path +
                                    ": the output would replace it"
                              : output + ": the output would replace the labels input " +
                                    spec.path);
  }
  std::unique_ptr<sample_source> labels = open_dataset(spec);
  if (!output.empty()) check_not_read_by(spec, labels->dataset_path(), labels->name(), output);
  if (data_file && labels->dataset_path() == src.src->dataset_path()) {
    throw error(errc::invalid_argument,
                labels->name() + ": --labels names the images themselves; labels are another "
                                 "array of one row per sample (class numbers, targets)");
  }
  if (labels->shape().empty()) {  // (no row count to compare)
    throw error(errc::bad_input,
                labels->name() + ": labels need one row per sample (" +
                    std::to_string(rows_wanted) + "), found a 0-d array");
  }
  if (input.has_row_range()) {
    if (labels->rows() != rows_wanted) {
      const std::string data = src.src->dataset_path().empty()
                                   ? input.path
                                   : input.path + ":" + src.src->dataset_path();
      throw error(errc::bad_input, labels->name() + ": labels need one row per sample of " +
                                       data + " (" + std::to_string(rows_wanted) +
                                       "), found " +
                                       std::to_string(labels->rows()));
    }
    dataset_spec range = input;
    range.purpose = dataset_spec::role::labels;
    labels = take_row_range(std::move(labels), range);
  }
  return labels;
}

}  // namespace detail

nlohmann::json quality_to_json(const quality& q) {
  nlohmann::json j;
  j["psnr_db"] = opt(q.psnr_db);  // null: lossless (see "lossless") or undefined
  j["lossless"] = q.mse == 0;
  j["psnr_undefined"] = q.psnr_undefined;
  j["sample_psnr_min_db"] = opt(q.sample_psnr_min);
  j["sample_psnr_mean_db"] = opt(q.sample_psnr_mean);
  j["lossless_samples"] = q.lossless_samples;
  j["ssim"] = opt(q.ssim);
  j["ssim_planes"] = q.ssim_planes;
  j["ssim_status"] = to_string(q.ssim_state);  // why "ssim" is null, when it is
  j["mse"] = q.mse;
  j["rmse"] = q.rmse;
  j["nrmse"] = opt(q.nrmse_defined());  // null when R is 0
  j["max_abs_error"] = q.max_abs_error;
  j["range"] = q.range;
  j["samples"] = q.samples;
  return j;
}

nlohmann::json detail::side_arrays_json(const archive_reader& r) {
  nlohmann::json sides = nlohmann::json::array();
  for (const auto& s : r.side_arrays())
    sides.push_back({{"name", s.name}, {"descr", s.descr}, {"shape", s.shape}, {"bytes", s.bytes}});
  return sides;
}

nlohmann::json chop_trial_to_json(const chop_trial& t) {
  return {{"chop", t.chop},
          {"psnr_db", opt(t.q.psnr_db)},
          {"ssim", opt(t.q.ssim)},
          {"measured_on", t.on_sample ? "sample" : "all"},
          {"meets", t.meets}};
}

nlohmann::json compress_result::to_json() const {
  nlohmann::json j;
  j["shape"] = geom.shape();
  j["layout"] = std::string(to_string(geom.lay));
  j["dtype"] = std::string(to_string(type));
  j["samples"] = geom.samples;
  j["block"] = codec.block;  // (and "codec", as info has them)
  j["chop"] = codec.chop;
  j["coeff"] = std::string(to_string(codec.coeff));
  j["offset"] = codec.offset;
  j["codec"] = codec_json(codec, geom);
  if (!source.empty()) j["source"] = source;
  if (!reader.empty()) j["reader"] = reader;
  if (!labels_source.empty()) j["labels_source"] = labels_source;
  j["samples_per_chunk"] = samples_per_chunk;
  j["chunks"] = chunks;
  j["input_bytes"] = input_bytes;
  if (!labels_source.empty()) j["labels_bytes"] = labels_bytes;
  j["archive_bytes"] = archive_bytes;
  j["ratio"] = ratio();
  j["bits_per_value"] = bits_per_value();
  j["seconds"] = seconds;
  j["throughput_gbps"] = gb_per_s(data_bytes(), seconds);
  j["compress_gbps"] = j["throughput_gbps"];  // eval's name for it
  j["quality"] = q ? quality_to_json(*q) : nlohmann::json(nullptr);
  if (nonfinite_replaced) j["nonfinite_replaced"] = *nonfinite_replaced;
  j["notes"] = notes;
  for (const auto& w : warnings) j["notes"].push_back(w);
  if (!trials.empty()) {
    auto& t = j["chop_search"] = nlohmann::json::array();
    for (const auto& tr : trials) t.push_back(chop_trial_to_json(tr));
  }
  return j;
}

nlohmann::json decompress_result::to_json() const {
  nlohmann::json j{{"shape", geom.shape()},
                   {"samples", geom.samples},
                   {"layout", std::string(to_string(geom.lay))},
                   {"dtype", std::string(to_string(type))},
                   {"output_bytes", output_bytes},
                   {"seconds", seconds},
                   {"throughput_gbps", gb_per_s(output_bytes, seconds)},
                   {"decompress_gbps", gb_per_s(output_bytes, seconds)},  // eval's name
                   {"notes", notes}};
  if (written_bytes) j["file_bytes"] = *written_bytes;
  if (!dataset.empty()) j["dataset"] = dataset;
  if (!labels_output.empty()) {
    j["labels"] = {{"output", labels_output}, {"shape", labels_shape}};
    if (!labels_dataset.empty()) j["labels"]["dataset"] = labels_dataset;
  }
  return j;
}

namespace {

/** One full compression with fixed codec parameters. With a target that the result misses,
 *  nothing is written. With `keep`, an archive that would be finished is left unfinished in
 *  it instead (no name yet, archive_bytes 0): the caller finishes it or drops it. */
compress_result write_archive(input_source& src, const std::string& output, backend& be,
                              const codec_params& p, const compress_options& o,
                              std::unique_ptr<sample_source>& labels, std::optional<double> range,
                              bool measure, std::optional<archive_writer>* keep = nullptr,
                              int below = 0, std::optional<quality>* below_q = nullptr) {
  const geometry& g = src.geom;
  const u64 cbps = coeff_bytes_per_sample(p, g);
  // `below` > 0: the whole dataset is measured at that chop too (a target search's chop
  // below, into *below_q), each chunk encoded, decoded and measured once more, no archive.
  codec_params bp = p;
  if (below > 0) bp.chop = below;
  const u64 below_cbps = below > 0 && measure ? coeff_bytes_per_sample(bp, g) : 0;
  const u64 ibps = src.bytes_per_sample;
  archive_header ah = make_archive_header(src, p, o.chunk_mb, o.tool_version, utc_text(o.created));
  if (labels) {  // said in the header, so that a stream reader takes labels of any size
    side_array_info l;
    l.bytes = labels->rows() * labels->row_bytes();
    ah.side_bytes = side_bytes_of({l}, ah.alignment);
  }
  const u64 spc = ah.samples_per_chunk;
  std::atomic<bool> stop_writes{false};  // a cancel: a write into a stalled pipe gives up
  // (0, 0): a chance to cancel while an output FIFO waits for its reader. (Without a progress
  // function the open blocks, as before, and a signal interrupts it.)
  std::function<void()> waiting;
  if (o.progress) waiting = [&o] { o.progress(0, 0); };
  archive_writer w(output_file::create(output, o.overwrite, true, waiting), ah);
  w.watch(write_check(stop_writes, o.progress, w.display_name()));

  // Chunks stream through run_chunks(): read on this thread, encoded (and measured) by
  // be.threads() workers at once, one chunk each, and written in order by a writer thread.
  // Each slot holds one chunk's buffers; memory is slots x (input, coefficients, decoded and
  // the measurements: 16 bytes a sample, which outweigh 1x1 planes at chop 1).
  const u64 slot_bytes =
      spc * (ibps * (measure ? 2 : 1) + cbps + (measure ? quality_batch::bytes_per_sample : 0) +
             (below_cbps > 0 ? below_cbps + quality_batch::bytes_per_sample : 0));
  const pipeline_workers crew = make_workers(be, slot_bytes, chunk_count(g.samples, spc));
  const unsigned workers = crew.count();
  const std::size_t slots = crew.slots();
  struct slot_buffers {
    byte_buffer in, coeffs, decoded, below_coeffs;  // in the backend's host memory
    u64 first = 0, n = 0;
    quality_batch measured, below_measured;
  };
  quality_accumulator acc(src.type, range, o.ssim || o.target.ssim);
  quality_accumulator below_acc(src.type, range, o.ssim || o.target.ssim);
  std::vector<slot_buffers> slot(slots);
  allocate_for(src.name(), slots, spc, double(slots) * double(slot_bytes), [&] {
    for (auto& b : slot) {
      b.in = host_buffer(be, spc * ibps);
      b.coeffs = host_buffer(be, spc * cbps);
      if (measure) {
        b.decoded = host_buffer(be, spc * ibps);
        b.measured.sse.reserve(spc);
        if (acc.computes_ssim()) b.measured.ssim_sum.reserve(spc);
      }
      if (below_cbps > 0) {
        b.below_coeffs = host_buffer(be, spc * below_cbps);
        b.below_measured.sse.reserve(spc);
        if (acc.computes_ssim()) b.below_measured.ssim_sum.reserve(spc);
      }
    }
  });
  u64 replaced = 0;  // non-finite values replaced; counted on the reading thread
  chunk_stages stages;
  stages.before_read = cancel_point(o.progress);
  stages.stop_writes = &stop_writes;
  std::atomic<bool> stop_reads{false};  // a failure: a read from a stalled pipe gives up
  stages.stop_reads = &stop_reads;
  const watch_reads<sample_source> watch(*src.src, stages, src.name());
  stages.read = [&](u64 c, std::size_t i) {
    slot_buffers& b = slot[i];
    b.first = c * spc;
    if (b.first >= g.samples) return false;
    b.n = std::min(spc, g.samples - b.first);
    replaced += src.read(b.first, b.n, b.in.data());
    return true;
  };
  stages.work = [&](u64, std::size_t i, unsigned worker) {
    slot_buffers& b = slot[i];
    backend& wb = *crew.be[worker];
    const auto view = make_view(g, src.type, static_cast<const void*>(b.in.data()), b.n);
    encode_batch(wb, p, view, std::span(b.coeffs.data(), b.n * cbps), src, b.first);
    if (measure) {  // (on the device where the backend measures there)
      decode_and_measure(wb, p, std::span<const std::byte>(b.coeffs.data(), b.n * cbps), view,
                         make_view(g, src.type, b.decoded.data(), b.n), acc,
                         workers > 1 ? 1 : o.threads, b.measured);
    }
    if (below_cbps > 0) {  // the same samples at the chop below, into the same decoded buffer
      const std::span<std::byte> kept(b.below_coeffs.data(), b.n * below_cbps);
      encode_batch(wb, bp, view, kept, src, b.first);
      decode_and_measure(wb, bp, kept, view, make_view(g, src.type, b.decoded.data(), b.n),
                         below_acc, workers > 1 ? 1 : o.threads, b.below_measured);
    }
  };
  stages.write = [&](u64, std::size_t i) {
    slot_buffers& b = slot[i];
    w.write_chunk(b.first, b.n, std::span<const std::byte>(b.coeffs.data(), b.n * cbps));
    if (measure) acc.add(b.measured);  // in chunk order: the sums do not depend on the workers
    if (below_cbps > 0) below_acc.add(b.below_measured);
    if (o.progress) o.progress(b.first + b.n, g.samples);
  };
  const u64 chunks = run_chunks(slots, workers, stages);
  if (labels) {  // a piece at a time: labels can be as large as the data (per-sample masks)
    w.write_side_array("labels", labels->type().native_descr(), labels->shape(),
                       labels->row_bytes(), [&](u64 first, u64 n, void* dst) {
                         labels->read_rows(first, n, dst);
                       });
  }

  compress_result r;
  r.geom = g;
  r.type = src.type;
  r.codec = p;
  r.samples_per_chunk = spc;
  r.chunks = chunks;
  r.labels_bytes = labels ? labels->rows() * labels->row_bytes() : 0;
  r.labels_stored_bytes = labels ? ah.side_bytes : 0;
  r.input_bytes = g.samples * ibps + r.labels_bytes;  // < 2^64: each is below 2^62 (open_dataset)
  r.values = g.samples * g.values_per_sample();
  if (src.nonfinite_replacement) r.nonfinite_replaced = replaced;
  if (measure) {
    r.q = measured_for_target(acc, src.name(),
                              o.target.any() ? "cannot be met: give --chop" : nullptr);
  }
  if (below_cbps > 0 && below_q != nullptr) {
    try {  // (figures the chop below cannot have: it is not tried, and this chop stands)
      *below_q = measured_for_target(below_acc, src.name(), "cannot be met: give --chop");
    } catch (const error&) {
      below_q->reset();
    }
  }
  w.set_footer_extra(footer_extra(r.input_bytes, r.q ? &*r.q : nullptr, r.nonfinite_replaced));
  if (o.target.any() && !meets(*r.q, o.target, src.name())) return r;  // caller retries; nothing written
  be.wait_started();  // a CUDA backend that could not start, asked for by name: no archive
  if (keep != nullptr) {
    w.watch({});  // (its check refers to this call's stop_writes; the output is a file)
    keep->emplace(std::move(w));
    return r;
  }
  w.finish();
  r.archive_bytes = w.bytes_written();
  return r;
}

}  // namespace

compress_result compress_npy(const std::string& input, const std::string& output, backend& be,
                             const compress_options& o) {
  return compress(parse_dataset_spec(input), output, be, o);
}

compress_result compress(const dataset_spec& given, const std::string& output, backend& be,
                         const compress_options& o) {
  check_threads(o.threads, "compress_options");
  // (A NaN passes every comparison: a PSNR target of NaN searched to chop 8.)
  if ((o.target.psnr_db && !std::isfinite(*o.target.psnr_db)) ||
      (o.target.ssim && !std::isfinite(*o.target.ssim))) {
    throw error(errc::invalid_argument, "a quality target must be a finite number");
  }
  // (SSIM lies in [-1, 1]: a target above searched every chop first, the command's --ssim
  // refuses it; the library's callers get the same.)
  if (o.target.ssim && (*o.target.ssim < -1 || *o.target.ssim > 1)) {
    throw error(errc::invalid_argument, "an SSIM target must be within -1 to 1, not " +
                                            g_text(*o.target.ssim));
  }
  const auto t0 = clock_type::now();
  const dataset_spec in = resolve_by_content(given);  // ("sst.nc:images" is sst.nc's)
  const std::string input = in.path;
  if (!in.memory) check_not_same(input, output);
  if (output != "-") {
    if (const auto m = member_of_unwritable_container(output)) {
      throw error(errc::invalid_argument, "-o " + output + ": compress writes a .dcz archive, "
                                          "not a member of " + m->file + " (decompress writes "
                                          "one as " + m->meant + ")");
    }
    const dataset_spec out = parse_dataset_spec(output);
    if (!out.dataset.empty()) {
      const bool npz = out.kind == file_kind::npz;
      throw error(errc::invalid_argument,
                  "-o " + output + ": compress writes a .dcz archive, not " +
                      (npz ? "an array of an .npz file (decompress writes .npz)"
                           : "an HDF5 dataset (decompress writes HDF5)"));
    }
  }
  input_source src =
      open_input(read_with_threads_of(be, in, o.threads), o.lay, o.nonfinite_replacement);
  check_not_read_by(in, src.src->dataset_path(), src.name(), output);
  std::vector<std::string> notes;
  if (!src.src->note().empty()) notes.push_back(src.src->note());
  if (auto n = one_image_note(src, o.lay); !n.empty()) notes.push_back(std::move(n));
  if (auto n = narrow_planes_note(src, o.lay); !n.empty()) notes.push_back(std::move(n));
  codec_params p;
  p.block = o.block;
  p.chop = o.target.any() ? 1 : o.chop;
  p.coeff = o.coeff.value_or(default_coeff_type(src.type, o.block));
  p.offset = codec_offset(src, o.offset);
  validate(p);
  if (auto n = far_offset_note(src, o.offset, p.offset, p.block, p.coeff); !n.empty()) {
    notes.push_back(std::move(n));
  }
  samples_per_chunk(1, 1, o.chunk_mb, 1);  // validates --chunk-mb before any work
  if (o.target.any() && !src.rereadable()) {
    throw error(errc::invalid_argument,
                "--psnr and --ssim measure the data before choosing and need a file input, "
                "not stdin or a pipe");
  }
  if (o.target.any() && reads_as_stream(output)) {
    // The chop chosen on a sample may miss on the whole dataset: its archive is then dropped
    // and the next chop written, which a stream cannot take back.
    throw error(errc::invalid_argument,
                "--psnr and --ssim may write the archive more than once and need a file "
                "output, not stdout, a pipe or a device");
  }
  const bool measure = o.measure_quality || o.target.any();

  // Labels: one row per sample, checked before anything is written.
  std::unique_ptr<sample_source> labels;
  if (o.labels && !o.labels_path.empty()) {
    throw error(errc::invalid_argument, "labels given twice: as " + o.labels->path + " and as " +
                                            o.labels_path);
  }
  if (o.labels || !o.labels_path.empty()) {
    labels = open_labels(o.labels ? *o.labels : parse_dataset_spec(o.labels_path), in, src,
                         output);
    if (!labels->note().empty()) notes.push_back(labels->note());
    const auto& lshape = labels->shape();
    if (lshape[0] != src.geom.samples) {  // (a 0-d array: refused by open_labels)
      // One HW image of as many rows as there are labels: flattened images, most likely.
      const std::string flat = one_image_note(src, o.lay);
      throw error(errc::bad_input,
                  labels->name() + ": labels need one row per sample (" +
                      std::to_string(src.geom.samples) + "), found " +
                      std::to_string(lshape[0]) +
                      (flat.empty() || lshape[0] != src.geom.height
                           ? std::string()
                           : " (" + flat + ")"));
    }
  }

  // An output that cannot be written is said before a first pass or a search, not after.
  if (output != "-") (void)check_output_path(output, o.overwrite);

  // R for float data: a first pass over a file, so that SSIM and a target search on a
  // sample use the dataset's range. PSNR alone needs no first pass: the accumulator sees
  // every value and takes the same max - min at the end.
  std::optional<double> range;
  if (measure && is_float(src.type) && (o.ssim || o.target.any()))
    range = float_range(in, o.lay, o.nonfinite_replacement, o.progress);

  std::vector<chop_trial> trials;
  if (o.target.any()) {
    trials = search_on_sample(src, be, p, range, o.target, o.ssim || o.target.ssim, o.threads,
                              o.search_bytes, o.progress, o.on_trial);
    p.chop = trials.back().chop;
  }
  const auto reported = [&](compress_result r) {
    r.notes = notes;
    if (output != "-") {  // (what a SIGKILL of an earlier run left beside it)
      for (auto& n : leftover_notes({output})) r.notes.push_back(std::move(n));
    }
    r.source = src.name();
    r.reader = src.src->reader();
    if (labels) r.labels_source = labels->name();
    r.warnings = compress_warnings(r, output, o.nonfinite_replacement);
    r.seconds = seconds_since(t0);
    return r;
  };
  if (!o.target.any()) {
    return reported(write_archive(src, output, be, p, o, labels, range, measure));
  }

  // The whole dataset at the sample's chop, unfinished until the search ends. Each pass also
  // measures the chop below on the whole dataset where only the sample has measured it: the
  // sample cannot say whether the rest of the data is easier or harder at the chop below
  // than at this one (a sample 1.5 dB short at chop 4, whose whole dataset beat it by 1 dB
  // at chop 5, kept chop 5, though the whole met the target at 4: 1.28x where 2x was there).
  const auto on_whole = [&trials](int k) -> const chop_trial* {
    for (const auto& t : trials)
      if (t.chop == k && !t.on_sample) return &t;
    return nullptr;
  };
  // Writes the whole dataset at q.chop (into *w) and records what it measured.
  const auto pass = [&](const codec_params& q, std::optional<archive_writer>* w) {
    const int below = q.chop > 1 && on_whole(q.chop - 1) == nullptr ? q.chop - 1 : 0;

    std::optional<quality> below_q;
    compress_result r =
        write_archive(src, output, be, q, o, labels, range, measure, w, below, &below_q);
    for (const auto& [k, fig] : {std::pair{q.chop, r.q}, std::pair{below, below_q}}) {
      if (k == 0 || !fig || on_whole(k) != nullptr) continue;  // (known: the sample was all)
      chop_trial full{k, *fig, false, meets(*fig, o.target, src.name())};
      trials.push_back(full);
      if (o.on_trial) o.on_trial(full);
    }
    return r;
  };
  std::optional<archive_writer> best_w;
  compress_result best;
  for (;;) {
    compress_result r = pass(p, &best_w);
    if (on_whole(p.chop)->meets) {
      best = std::move(r);
      break;
    }
    // The sample was kinder than the whole dataset: one more coefficient per axis.
    if (p.chop == p.block) {
      throw error(errc::quality_not_met,
                  unreachable_text(src.name(), p, *r.q, o.target, " on the whole dataset"));
    }
    ++p.chop;
  }
  // The whole dataset met the target at the chop below too: written at it (the larger
  // ratio), measuring the next one down, as long as that holds.
  while (p.chop > 1 && on_whole(p.chop - 1) != nullptr && on_whole(p.chop - 1)->meets) {
    codec_params q = p;
    --q.chop;
    std::optional<archive_writer> w;
    compress_result r = pass(q, &w);
    if (!w) break;  // (its figures are the ones measured below: it meets)
    best = std::move(r);
    best_w = std::move(w);  // (the former, unfinished, leaves nothing behind)
    p = q;
  }
  best_w->finish();
  best.archive_bytes = best_w->bytes_written();
  best.trials = std::move(trials);
  return reported(std::move(best));
}

decompress_result decompress_to_npy(const std::string& input, const std::string& output,
                                    backend& be, const decompress_options& o) {
  return decompress(input, parse_dataset_spec(output), be, o);
}

decompress_result decompress(const std::string& input, const dataset_spec& out, backend& be,
                             const decompress_options& o) {
  check_threads(o.threads, "decompress_options");
  refuse_npy_member_output(out, "the output");
  if (out.kind == file_kind::npy && !out.dataset.empty()) {  // (a spec made by hand: C++)
    throw error(errc::invalid_argument,
                out.path + ": a .npy file holds one array, which is not named, and dataset " +
                    out.dataset + " names one (an HDF5 file or a .npz names its arrays)");
  }
  const auto t0 = clock_type::now();
  const std::string output = out.path;
  check_not_same(input, output);
  // HDF5 and .npz outputs get the labels beside the data, as /labels (the array labels) or
  // where --labels-out names a dataset of the same file, unless --labels-out names a file of
  // their own; any other output cannot share its file with the labels.
  const bool npz_out = out.kind == file_kind::npz;
  std::string labels_beside = npz_out ? npz_labels_array : hdf5_labels_dataset;
  // In the data's group: /train/labels beside /train/images, where the input rule looks for
  // them (it was /labels, which a file of a train and a test group could not hold twice).
  if (out.kind == file_kind::hdf5) {
    const auto slash = out.dataset.rfind('/');
    if (slash != std::string::npos && slash > 0) {
      labels_beside = out.dataset.substr(0, slash) + hdf5_labels_dataset;
    }
  }
  std::optional<dataset_spec> labels_file;  // --labels-out, when it is a file of its own
  if (!o.labels_out.empty()) {
    dataset_spec ls = parse_dataset_spec(o.labels_out);
    refuse_npy_member_output(ls, "the labels");
    check_not_same(input, ls.path);
    if (ls.kind == file_kind::npz) detail::check_member_key(ls.dataset, ls.path);  // now, not at the end
    // (A character device such as /dev/null takes both: written in place, never replaced.)
    struct stat st {};
    const bool device = output != "-" && ::stat(output.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
    if (!device && same_output(output, ls.path)) {  // a dataset of the HDF5 or .npz output, or an error
      if (out.kind != ls.kind || (out.kind != file_kind::hdf5 && !npz_out)) {
        throw error(errc::invalid_argument,
                    o.labels_out + ": the labels and the decoded data cannot share one output");
      }
      if (output != "-" && !same_path(output, ls.path)) {
        // Written into the output's new file, which replaces the output's name alone: the
        // other name kept the old file, without the labels (exit 0, "labels -> o.npz:y").
        throw error(errc::invalid_argument,
                    o.labels_out + ": " + ls.path + " is another name (a hard link) of the " +
                        "output " + output + ", which is written anew under its own name: " +
                        "give the labels' output by the same name, " + output + ":" +
                        (npz_out ? "NAME" : "/DATASET"));
      }
      if (!ls.dataset.empty()) labels_beside = ls.dataset;  // (parse_dataset_spec gave it its '/')
    } else {
      // Refuse an existing labels file now, not after decoding everything (a FIFO or device
      // is written in place).
      if (ls.path != "-") check_dataset_output(ls, o.overwrite);
      // An HDF5 or .npz labels file named without a dataset gets /labels (labels), as beside
      // HDF5 (.npz) data.
      if (ls.kind == file_kind::hdf5 && ls.dataset.empty()) ls.dataset = hdf5_labels_dataset;
      if (ls.kind == file_kind::npz && ls.dataset.empty()) ls.dataset = npz_labels_array;
      labels_file = std::move(ls);
    }
  }
  archive_reader r = archive_reader::open(input);
  r.set_read_threads(read_threads_for(o.threads));
  const auto& h = r.header();
  const u64 total = h.geom.samples;
  const u64 first = o.first, end = o.end.value_or(total);
  if (const std::string problem = sample_range_problem(first, o.end, total); !problem.empty()) {
    throw error(errc::invalid_argument,
                r.display_name() + ": " + problem + ": the archive holds " +
                    std::to_string(total) + (total == 1 ? " sample" : " samples"));
  }
  geometry g = h.geom;
  g.samples = end - first;
  if (g.lay == layout::hw && g.samples != 1) throw error(errc::internal, "HW archive range");
  if (!o.labels_out.empty() && r.random_access() && r.find_side_array("labels") == nullptr) {
    throw error(errc::bad_input, r.display_name() + ": the archive holds no labels");
  }

  // Where it came from, for formats that keep attributes (HDF5).
  nlohmann::json attrs = {{"dctchop_archive", r.display_name()},
                          {"dctchop_block", h.codec.block},
                          {"dctchop_chop", h.codec.chop},
                          {"dctchop_coeff", std::string(to_string(h.codec.coeff))},
                          {"dctchop_layout", std::string(to_string(h.geom.lay))},
                          {"dctchop_first_sample", first}};
  if (h.provenance.contains("source") && h.provenance["source"].is_string()) {
    attrs["dctchop_source"] = h.provenance["source"];
  }
  // NaN and Inf stored as a value: the output cannot mark their places, its attributes can
  // say that there were some.
  if (h.nonfinite_replacement) attrs["dctchop_nonfinite_replacement"] = *h.nonfinite_replacement;
  // What the footer says: a file's is read by now, a stream's at its end (added then).
  auto footer_attributes = [&r] {
    nlohmann::json a = nlohmann::json::object();
    const auto& f = r.footer();
    if (f.contains("quality") && f["quality"].is_object() && f["quality"]["psnr_db"].is_number()) {
      a["dctchop_psnr_db"] = f["quality"]["psnr_db"].get<double>();
    }
    if (const auto n = r.nonfinite_replaced()) a["dctchop_nonfinite_replaced"] = *n;
    return a;
  };
  if (r.random_access()) attrs.update(footer_attributes());
  // HDF5 and .npz outputs get the labels beside the data: the data cannot be there (nor, in
  // HDF5, in a group of them or around them).
  // The data's dataset or array (what an output named without one gets), for the checks here
  // and the report.
  const std::string ds = !out.dataset.empty()          ? out.dataset
                         : npz_out                     ? npz_default_array
                         : out.kind == file_kind::hdf5 ? hdf5_default_dataset
                                                       : "";
  if ((out.kind == file_kind::hdf5 || npz_out) && !labels_file &&
      r.find_side_array("labels") != nullptr) {
    const std::string& labels = labels_beside;
    if (ds == labels ||
        (!npz_out && (ds.rfind(labels + "/", 0) == 0 || labels.rfind(ds + "/", 0) == 0))) {
      // (An HDF5 dataset holds no other object: /x/y cannot be beside the data /x.)
      const std::string why =
          ds == labels ? "the data and the archive's labels would both be " + labels
          : labels.rfind(ds + "/", 0) == 0
              ? "the labels' path " + labels + " would lie inside the data's dataset"
              : "the data's path would lie inside the labels' dataset " + labels;
      throw error(errc::invalid_argument,
                  out.path + ":" + ds + ": " + why +
                      (npz_out ? "; choose another array name" : "; choose another dataset path"));
    }
  }
  std::atomic<bool> stop_writes{false};  // a cancel: a write into a stalled pipe gives up
  auto w = create_dataset(out, npy_dtype_of(h.type), g.shape(), o.overwrite, attrs);
  w->watch(write_check(stop_writes, o.progress, w->name()));

  const u64 cbps = h.coeff_bytes_per_sample();
  const u64 ibps = h.geom.values_per_sample() * size_of(h.type);
  const u64 rps = rows_per_sample(h.geom);
  // Chunks stream through run_chunks(): read and checked on this thread, decoded by
  // be.threads() workers at once, one chunk each, and written in order by a writer thread.
  // A chunk that lies outside --samples is read (a stream cannot skip it) but not decoded.
  struct slot_buffers {
    chunk_info info;
    byte_buffer coeffs, out;  // in the backend's host memory
    u64 lo = 0, hi = 0;  // the samples of this chunk that are written
  };
  const u64 max_chunk = h.samples_per_chunk;
  const bool random = r.random_access();
  const std::size_t first_chunk = random ? r.chunk_of(first) : 0;
  const std::size_t last_chunk = random ? r.chunk_of(end - 1) : 0;
  const u64 slot_bytes = max_chunk * (cbps + ibps);
  const pipeline_workers crew =
      make_workers(be, slot_bytes,
                   random ? last_chunk - first_chunk + 1 : chunk_count(total, max_chunk));
  std::vector<slot_buffers> slot(crew.slots());
  allocate_for(r.display_name(), slot.size(), max_chunk, double(slot.size()) * double(slot_bytes), [&] {
                 for (auto& b : slot) {  // a chunk holds at most max_chunk samples
                   b.coeffs = host_buffer(be, max_chunk * cbps);
                   b.out = host_buffer(be, max_chunk * ibps);
                 }
               });
  chunk_stages stages;
  stages.before_read = cancel_point(o.progress);
  stages.stop_writes = &stop_writes;
  std::atomic<bool> stop_reads{false};  // a failure: a read from a stalled pipe gives up
  stages.stop_reads = &stop_reads;
  const watch_reads<archive_reader> watch(r, stages, r.display_name());
  stages.read = [&](u64 c, std::size_t i) {
    slot_buffers& b = slot[i];
    if (random) {
      const std::size_t ci = first_chunk + c;
      if (ci > last_chunk) return false;
      b.info = r.chunks()[ci];
      r.read_chunk(ci, b.coeffs);
    } else if (!r.next_chunk(b.info, b.coeffs)) {
      return false;
    }
    b.lo = std::max(b.info.first, first);
    b.hi = std::max(b.lo, std::min(b.info.first + b.info.count, end));
    return true;
  };
  stages.work = [&](u64, std::size_t i, unsigned worker) {
    slot_buffers& b = slot[i];
    const u64 n = b.hi - b.lo;
    if (n == 0) return;
    if (b.out.size() < n * ibps) b.out.resize(n * ibps);
    crew.be[worker]->decode(
        h.codec, std::span<const std::byte>(b.coeffs.data() + (b.lo - b.info.first) * cbps, n * cbps),
        make_view(h.geom, h.type, b.out.data(), n));
  };
  u64 done = 0;
  stages.write = [&](u64, std::size_t i) {
    const slot_buffers& b = slot[i];
    const u64 n = b.hi - b.lo;
    if (n == 0) return;
    w->write_rows(b.out.data(), n * rps);
    done += n;
    if (o.progress) o.progress(done, g.samples);
  };
  run_chunks(slot.size(), crew.count(), stages);

  // Labels: to --labels-out, and beside the data in formats that hold several arrays (HDF5,
  // .npz). The reader has checked their description against the header (numeric, one row per
  // sample). A labels file of its own appears after the data's output, so that a failure to
  // write the data leaves neither.
  std::unique_ptr<sample_sink> lw;
  decompress_result res;
  if (const side_array_info* info = r.find_side_array("labels")) {
    // Copied a piece at a time (labels can be as large as the data: per-sample masks, and no
    // command holds the whole of either). All of them into a file not yet named are checked
    // by that copy, which a wrong checksum ends before anything is named; a part, or labels
    // for an output that takes bytes as they come (standard output, a FIFO), whole first:
    // before a file of their own is begun, and beside the data when the output asks for
    // their first rows (an output with no place for them reads none).
    const npy_dtype lt = *parse_npy_descr(info->descr);
    const u64 row = info->bytes / total;
    auto shape = info->shape;
    shape[0] = end - first;
    const std::string& to = labels_file ? labels_file->path : output;
    const bool in_place = to == "-" || check_output_path(to, true).in_place;
    row_source part;
    bool labels_checked = false;
    if (first == 0 && end == total && !in_place) {
      part = r.side_array_in_order("labels");
    } else {
      // A file of their own, or beside the data in an output that takes bytes as they come
      // (an .npz to a FIFO): checked before its headers reach the reader, which would see a
      // data member complete and a labels member begun.
      if (labels_file || (in_place && (npz_out || out.kind == file_kind::hdf5))) {
        r.verify_side_array("labels");
        labels_checked = true;
      }
      part = [&](u64 at, u64 n, void* dst) {
        if (!labels_checked) r.verify_side_array("labels");
        labels_checked = true;
        r.read_side_array_rows("labels", first + at, n,
                               std::span<std::byte>(static_cast<std::byte*>(dst), n * row));
      };
    }
    if (labels_file) {  // there only: a file of their own was asked for
      lw = create_dataset(*labels_file, lt, shape, o.overwrite);
      for_each_row_piece(end - first, row, part,
                         [&](const void* p, u64, u64 n) { lw->write_rows(p, n); });
      res.labels_output = labels_file->path;
      res.labels_dataset = labels_file->dataset;
      res.labels_shape = shape;
    } else if (w->add_side_dataset(labels_beside, lt, shape, part)) {
      res.labels_output = output;
      res.labels_dataset = labels_beside;
      res.labels_shape = shape;
    } else {
      res.notes.push_back(r.display_name() + " holds labels, which " +
                          (output == "-" ? std::string("standard output") : output) +
                          " has no place for: --labels-out FILE.npy writes them (an .npz or "
                          ".h5 output" + (out.kind == file_kind::raw ? " without --raw" : "") +
                          " holds them beside the data)");
    }
  } else if (!o.labels_out.empty()) {
    throw error(errc::bad_input, r.display_name() + ": the archive holds no labels");
  }
  if (!random) w->add_attributes(footer_attributes());
  be.wait_started();  // a CUDA backend that could not start, asked for by name: no output
  // Both written out before either is named: a failure (a full disk) then leaves neither,
  // never the new data beside the old labels.
  w->prepare();
  if (lw) lw->prepare();
  // The file the data replaces (-f) is kept until the labels are named too: naming them can
  // still fail (a file appeared at their path without -f; with -f, a folder whose sticky bit
  // keeps another user's file), and then the old data goes back in place.
  std::optional<kept_original> old_data;
  if (lw && output != "-") old_data.emplace(out.path);
  // The labels are named right after the data, the folders synced after both (the data's
  // first): a SIGKILL in the data's sync (milliseconds on a disk) left it without its labels.
  if (lw) {
    w->defer_folder_sync();
    lw->defer_folder_sync();
  }
  w->finish();
  if (lw) {
    try {
      lw->finish();
    } catch (...) {
      if (!old_data || !old_data->restore()) w->withdraw();  // (withdraw removes a file that replaced none)
      w->sync_folder();  // (what stays, named: a replaced file that could not be put back)
      throw;
    }
    w->sync_folder();
    lw->sync_folder();
    old_data.reset();  // (its hidden name gone before the look for leftovers below)
  }
  if (const u64 n = r.nonfinite_replaced().value_or(0); n > 0) {  // (a stream's footer is read by now)
    res.notes.push_back(r.display_name() + ": its original held " + std::to_string(n) +
                        " NaN/Inf value" + (n == 1 ? "" : "s") + ", compressed as " +
                        g_text(*h.nonfinite_replacement) +
                        " (--nonfinite replace=V): their places decode as ordinary values, "
                        "not as NaN or Inf, and nothing in the output marks them");
  }

  // What a SIGKILL of an earlier run left beside the outputs (an HDF5 output's folder, the
  // old data that -f --labels-out kept): said, never removed (another run may be at work).
  std::vector<std::string> outputs;
  if (output != "-") outputs.push_back(output);
  if (labels_file && labels_file->path != "-") outputs.push_back(labels_file->path);
  for (auto& n : leftover_notes(outputs)) res.notes.push_back(std::move(n));
  res.geom = g;
  res.type = h.type;
  res.dataset = ds;
  res.output_bytes = g.samples * ibps;
  res.written_bytes = w->bytes_written();
  res.seconds = seconds_since(t0);
  return res;
}

ssim_status recorded_ssim_status(const nlohmann::json& info) {
  if (!info.contains("quality") || !info["quality"].is_object()) return ssim_status::off;
  const auto& q = info["quality"];
  auto number = [](const nlohmann::json& j, const char* key) -> std::optional<double> {
    if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<double>();
  };
  if (number(q, "ssim")) return ssim_status::measured;
  // (dctchop writes "ssim": null where there is none; left out, it is not known why.)
  if (!q.contains("ssim")) return ssim_status::not_recorded;
  if (number(q, "range").value_or(1) == 0) return ssim_status::constant;
  if (number(info, "height").value_or(0) < 7 || number(info, "width").value_or(0) < 7)
    return ssim_status::small_planes;
  const nlohmann::json::json_pointer source("/provenance/source");
  const auto type = parse_dtype(info.value("dtype", std::string()));
  if (type && is_float(*type) && info.contains(source) && info[source] == "<stdin>")
    return ssim_status::no_range;
  return ssim_status::off;
}

nlohmann::json archive_info(const std::string& input) {
  archive_reader r = archive_reader::open(input);
  if (!r.random_access()) {
    // A stream: read it through, which also checks every chunk and counts its bytes, and
    // the side arrays after them (the stream's end keeps them unchecked).
    chunk_info c;
    std::vector<std::byte> buf;
    while (r.next_chunk(c, buf)) {
    }
    for (const auto& s : r.side_arrays()) r.verify_side_array(s.name);
  }
  return archive_info(r);
}

nlohmann::json archive_info(const archive_reader& r) {
  const u64 bytes = r.file_bytes();
  const auto& h = r.header();
  nlohmann::json j = h.to_json();
  j["file"] = r.display_name();
  j["archive"] = r.display_name();  // (the key every command has)
  j["version"] = std::to_string(h.major) + "." + std::to_string(h.minor);
  const auto& f = r.footer();
  j["chunks"] = r.chunks().size();
  u64 side_bytes = 0;  // each below the file's size (the reader checks): no wrap
  for (const auto& s : r.side_arrays()) side_bytes += s.bytes;
  j["side_arrays"] = side_arrays_json(r);
  if (f.contains("quality")) {
    j["quality"] = f["quality"];
    // Why SSIM is null, in the word the other reports use (the footer keeps numbers only).
    j["quality"]["ssim_status"] = to_string(recorded_ssim_status(j));
  }
  if (f.contains("nonfinite_replaced")) j["nonfinite_replaced"] = f["nonfinite_replaced"];
  if (bytes > 0) {
    j["archive_bytes"] = bytes;
    // The footer's figure is informative (ARCHIVE.md); the header's shape and dtype and the
    // side arrays give the same for archives of other writers that leave it out.
    const u64 values = h.geom.samples * h.geom.values_per_sample();
    const u64 input_bytes = f.contains("input_bytes") && f["input_bytes"].is_number_unsigned()
                                ? f["input_bytes"].get<u64>()
                                : values * size_of(h.type) + side_bytes;
    if (input_bytes > 0 && values > 0) {
      j["input_bytes"] = input_bytes;
      j["ratio"] = double(input_bytes) / double(bytes);
      // (Less the side arrays with their padding, as compress reports it.)
      j["bits_per_value"] = bits_per_value(bytes, side_bytes_of(r.side_arrays(), h.alignment),
                                           values);
    }
  }
  return j;
}

}  // namespace dctchop::formats
