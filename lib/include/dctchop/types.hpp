/** @file types.hpp
 *  Element types, coefficient types and layouts, with their names as used on the command line
 *  and in the archive header.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dctchop {

/** Element type of an input dataset. f16 is IEEE binary16 (NumPy's float16), computed in
 *  binary32 like u8..f32; i32 and u32 (detector counts, say) in binary64 like f64, which
 *  holds each of their values exactly. f16, i8, i32 and u32 were added last, so the older
 *  values keep their numbers. */
enum class dtype { u8, u16, i16, f32, f64, f16, i8, i32, u32 };

/** Storage type of the kept DCT coefficients. */
enum class coeff_type { f16, bf16, f32, i16 };

/** How an array's axes map to samples, planes and rows/columns.
 *  hw: one sample of one plane; nhw: N samples of one plane; nhwc: channels last;
 *  nchw: channels first; automatic: decided from the shape by resolve_layout(). */
enum class layout { hw, nhw, nhwc, nchw, automatic };

std::size_t size_of(dtype t) noexcept;
std::size_t size_of(coeff_type t) noexcept;
bool is_float(dtype t) noexcept;
/** Whether the codec computes this dtype in binary64 (f64, i32, u32), not binary32. */
bool computes_in_double(dtype t) noexcept;
/** The largest finite value of the type: 255 for u8, 65504 for f16, FLT_MAX for f32, ... */
double max_finite(dtype t) noexcept;
/** The largest finite coefficient of the type: 65504 for f16, 0x1.fep127 for bf16, FLT_MAX for
 *  f32, 32767 for i16. (A coefficient that rounds past it is refused, never stored as Inf.) */
double max_finite(coeff_type t) noexcept;

std::string_view to_string(dtype t) noexcept;
std::string_view to_string(coeff_type t) noexcept;
std::string_view to_string(layout l) noexcept;

/** A shape as reports print it: "16x32x32x3". */
std::string shape_text(std::span<const std::uint64_t> shape);

/** Parse a name ("u8", "uint8", "f16", "NHWC", "auto", ...); nullopt when unknown. */
std::optional<dtype> parse_dtype(std::string_view s) noexcept;
/** The dtypes, in dctchop's names and in NumPy's, as messages list them. */
inline constexpr const char* k_dtype_names = "i8, u8, i16, u16, i32, u32, f16, f32, f64";
inline constexpr const char* k_dtype_numpy_names =
    "int8, uint8, int16, uint16, int32, uint32, float16, float32, float64";
std::optional<coeff_type> parse_coeff_type(std::string_view s) noexcept;
std::optional<layout> parse_layout(std::string_view s) noexcept;

/** The offset o subtracted before the transform (formats/ARCHIVE.md, "The codec", step 1): the middle of an
 *  unsigned type's range (u32: 2^31), 0 for signed and float types. `compress` takes the
 *  first sample's mean instead for float, i32 and u32 data (formats::offset_choice). */
double default_offset(dtype t) noexcept;

/** Default coefficient type: f16 for integer inputs whose coefficients fit f16 at this block
 *  size (u8, i8), f32 otherwise (u16, i16, i32, u32 and float inputs, f16 included: its
 *  coefficients reach B times its largest value, past f16's range). */
coeff_type default_coeff_type(dtype t, int block) noexcept;

/** Geometry of a dataset once its layout is resolved: N samples of C planes of H x W. */
struct geometry {
  layout lay = layout::nhw;    ///< resolved layout (never automatic)
  std::uint64_t samples = 1;   ///< N (1 for hw)
  std::uint64_t planes = 1;    ///< C, planes per sample
  std::uint64_t height = 1;    ///< H
  std::uint64_t width = 1;     ///< W
  std::uint64_t values_per_sample() const { return planes * height * width; }
  /** The array shape this geometry came from (2, 3 or 4 axes). */
  std::vector<std::uint64_t> shape() const;
  /** The axes of one sample, as a batch of N samples has them after its first axis N:
   *  (H, W) for HW and NHW, (H, W, C) for NHWC, (C, H, W) for NCHW. */
  std::vector<std::uint64_t> sample_shape() const;
};

/** Resolve a layout against an array shape. `automatic` takes HW for 2 axes; NHW for 3 axes,
 *  except that a last axis of 1..4 after two axes above 4 (one H x W x C image, or N planes?)
 *  is ambiguous; for 4 axes NHWC when the last axis is 1..4, NCHW when axis 1 is. Throws
 *  dctchop::error(invalid_argument) for an ambiguous shape (the message names --layout) or a
 *  shape the requested layout cannot take, error(bad_input) for an empty axis or a number of
 *  axes no layout takes. */
geometry resolve_layout(std::span<const std::uint64_t> shape, layout requested);

}  // namespace dctchop
