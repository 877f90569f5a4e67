#include "dctchop/types.hpp"

#include <algorithm>
#include <limits>
#include <cctype>
#include <string>

#include "dctchop/error.hpp"

namespace dctchop {

const char* to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: return "invalid_argument";
    case errc::bad_input: return "bad_input";
    case errc::corrupt: return "corrupt";
    case errc::unsupported_version: return "unsupported_version";
    case errc::out_of_range: return "out_of_range";
    case errc::io: return "io";
    case errc::output_exists: return "output_exists";
    case errc::backend_unavailable: return "backend_unavailable";
    case errc::quality_not_met: return "quality_not_met";
    case errc::interrupted: return "interrupted";
    case errc::internal: return "internal";
  }
  return "unknown";
}

std::size_t size_of(dtype t) noexcept {
  switch (t) {
    case dtype::u8: case dtype::i8: return 1;
    case dtype::u16: case dtype::i16: case dtype::f16: return 2;
    case dtype::f32: case dtype::i32: case dtype::u32: return 4;
    case dtype::f64: return 8;
  }
  return 0;
}

std::size_t size_of(coeff_type t) noexcept { return t == coeff_type::f32 ? 4 : 2; }

bool computes_in_double(dtype t) noexcept {
  return t == dtype::f64 || t == dtype::i32 || t == dtype::u32;
}

bool is_float(dtype t) noexcept {
  return t == dtype::f16 || t == dtype::f32 || t == dtype::f64;
}

double max_finite(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return 255.0;
    case dtype::u16: return 65535.0;
    case dtype::i16: return 32767.0;
    case dtype::i8: return 127.0;
    case dtype::i32: return 2147483647.0;
    case dtype::u32: return 4294967295.0;
    case dtype::f16: return 65504.0;
    case dtype::f32: return double(std::numeric_limits<float>::max());
    case dtype::f64: return std::numeric_limits<double>::max();
  }
  return 0.0;
}

double max_finite(coeff_type t) noexcept {
  switch (t) {
    case coeff_type::f16: return max_finite(dtype::f16);
    case coeff_type::bf16: return 0x1.fep127;  // (no dtype of its own)
    case coeff_type::f32: return max_finite(dtype::f32);
    case coeff_type::i16: return max_finite(dtype::i16);
  }
  return 0.0;
}

std::string_view to_string(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return "u8";
    case dtype::u16: return "u16";
    case dtype::i16: return "i16";
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::f16: return "f16";
    case dtype::i8: return "i8";
    case dtype::i32: return "i32";
    case dtype::u32: return "u32";
  }
  return "?";
}

std::string_view to_string(coeff_type t) noexcept {
  switch (t) {
    case coeff_type::f16: return "f16";
    case coeff_type::bf16: return "bf16";
    case coeff_type::f32: return "f32";
    case coeff_type::i16: return "i16";
  }
  return "?";
}

std::string_view to_string(layout l) noexcept {
  switch (l) {
    case layout::hw: return "HW";
    case layout::nhw: return "NHW";
    case layout::nhwc: return "NHWC";
    case layout::nchw: return "NCHW";
    case layout::automatic: return "auto";
  }
  return "?";
}

namespace {
std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}
}  // namespace

std::optional<dtype> parse_dtype(std::string_view s) noexcept {
  std::string l = lower(s);
  if (l == "u8" || l == "uint8") return dtype::u8;
  if (l == "u16" || l == "uint16") return dtype::u16;
  if (l == "i16" || l == "int16") return dtype::i16;
  if (l == "f32" || l == "float32") return dtype::f32;
  if (l == "f64" || l == "float64") return dtype::f64;
  if (l == "f16" || l == "float16") return dtype::f16;
  if (l == "i8" || l == "int8") return dtype::i8;
  if (l == "i32" || l == "int32") return dtype::i32;
  if (l == "u32" || l == "uint32") return dtype::u32;
  return std::nullopt;
}

std::optional<coeff_type> parse_coeff_type(std::string_view s) noexcept {
  std::string l = lower(s);
  if (l == "f16" || l == "float16") return coeff_type::f16;
  if (l == "bf16" || l == "bfloat16") return coeff_type::bf16;
  if (l == "f32" || l == "float32") return coeff_type::f32;
  if (l == "i16" || l == "int16") return coeff_type::i16;
  return std::nullopt;
}

std::optional<layout> parse_layout(std::string_view s) noexcept {
  std::string l = lower(s);
  if (l == "hw") return layout::hw;
  if (l == "nhw") return layout::nhw;
  if (l == "nhwc") return layout::nhwc;
  if (l == "nchw") return layout::nchw;
  if (l == "auto") return layout::automatic;
  return std::nullopt;
}

double default_offset(dtype t) noexcept {
  switch (t) {
    case dtype::u8: return 128.0;
    case dtype::u16: return 32768.0;
    case dtype::u32: return 2147483648.0;
    default: return 0.0;
  }
}

coeff_type default_coeff_type(dtype t, int block) noexcept {
  // The largest coefficient of an orthonormal B x B DCT is B * max|x - o| (the DC term).
  if ((t == dtype::u8 || t == dtype::i8) && block * 128.0 <= 65504.0) return coeff_type::f16;
  return coeff_type::f32;
}

std::vector<std::uint64_t> geometry::shape() const {
  switch (lay) {
    case layout::hw: return {height, width};
    case layout::nhw: return {samples, height, width};
    case layout::nhwc: return {samples, height, width, planes};
    case layout::nchw: return {samples, planes, height, width};
    case layout::automatic: break;
  }
  return {};
}

std::vector<std::uint64_t> geometry::sample_shape() const {
  auto s = shape();
  if (lay != layout::hw && !s.empty()) s.erase(s.begin());
  return s;
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

namespace {
std::string shape_str(std::span<const std::uint64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");
}
}  // namespace

geometry resolve_layout(std::span<const std::uint64_t> shape, layout requested) {
  const std::size_t nd = shape.size();
  for (auto d : shape) {
    if (d == 0) {
      throw error(errc::bad_input, "shape " + shape_str(shape) + " has an empty axis");
    }
  }
  if (nd < 2 || nd > 4) {  // no layout takes it, asked for or not (bad input, exit 3, either way)
    const bool ones = std::count(shape.begin(), shape.end(), std::uint64_t{1}) > 0;
    throw error(errc::bad_input,
                "shape " + shape_str(shape) + " has " + std::to_string(nd) +
                    (nd == 1 ? " axis" : " axes") +
                    "; dctchop takes 2 (HW), 3 (NHW) or 4 (NHWC, NCHW)" +
                    (nd > 4 && ones ? ": reshape it (numpy's squeeze drops axes of size 1)"
                     : nd == 1    ? ": reshape it to the planes it holds (1, N for one row)"
                                  : ": reshape it"));
  }
  layout l = requested;
  if (l == layout::automatic) {
    if (nd == 2) {
      l = layout::hw;
    } else if (nd == 3) {
      if (shape[2] <= 4 && shape[0] > 4 && shape[1] > 4) {
        throw error(errc::invalid_argument,
                    "shape " + shape_str(shape) +
                        " is ambiguous: N planes of H x W, or one H x W image of " +
                        std::to_string(shape[2]) + (shape[2] == 1 ? " channel" : " channels") +
                        "; pass --layout NHW, or reshape to 1xHxWxC and pass --layout NHWC");
      }
      l = layout::nhw;
    } else if (nd == 4) {
      bool last = shape[3] >= 1 && shape[3] <= 4;
      bool second = shape[1] >= 1 && shape[1] <= 4;
      if (last && !second) l = layout::nhwc;
      else if (second && !last) l = layout::nchw;
      else if (last && second)
        throw error(errc::invalid_argument,
                    "shape " + shape_str(shape) +
                        " is ambiguous between NHWC and NCHW; pass --layout NHWC or --layout NCHW");
      else
        throw error(errc::invalid_argument,
                    "shape " + shape_str(shape) +
                        ": neither axis 1 nor axis 3 looks like channels (1..4); pass --layout "
                        "NHWC or --layout NCHW");
    } else {
      throw error(errc::bad_input, "shape " + shape_str(shape) +
                                       " has " + std::to_string(nd) +
                                       (nd == 1 ? " axis" : " axes") +
                                       "; dctchop takes 2 (HW), 3 (NHW) or 4 (NHWC, NCHW)");
    }
  }
  std::size_t want = l == layout::hw ? 2 : l == layout::nhw ? 3 : 4;
  if (nd != want) {
    throw error(errc::invalid_argument, "layout " + std::string(to_string(l)) + " needs " +
                                            std::to_string(want) + " axes but the shape is " +
                                            shape_str(shape));
  }
  geometry g;
  g.lay = l;
  switch (l) {
    case layout::hw: g.samples = 1; g.planes = 1; g.height = shape[0]; g.width = shape[1]; break;
    case layout::nhw: g.samples = shape[0]; g.height = shape[1]; g.width = shape[2]; break;
    case layout::nhwc:
      g.samples = shape[0]; g.height = shape[1]; g.width = shape[2]; g.planes = shape[3]; break;
    case layout::nchw:
      g.samples = shape[0]; g.planes = shape[1]; g.height = shape[2]; g.width = shape[3]; break;
    case layout::automatic: break;
  }
  return g;
}

}  // namespace dctchop
