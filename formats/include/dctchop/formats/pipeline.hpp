/** @file pipeline.hpp
 *  Whole-file operations that join the formats and the codec chunk by chunk, so that no
 *  operation holds more than a few chunks in memory.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "dctchop/codec.hpp"
#include "dctchop/metrics.hpp"
#include "dctchop/types.hpp"

namespace dctchop::formats {

/** Called after each chunk with (samples done, samples in total). May throw to cancel. */
using progress_fn = std::function<void(std::uint64_t, std::uint64_t)>;

struct compress_options {
  int block = 8;
  int chop = 4;
  std::optional<coeff_type> coeff;      ///< default: default_coeff_type(dtype, block)
  layout lay = layout::automatic;
  double chunk_mb = 4.0;                ///< target coefficient bytes per chunk, in MiB
  std::string labels_path;              ///< optional .npy of per-sample labels
  bool overwrite = false;
  bool measure_quality = true;          ///< decode each chunk and accumulate the error
  std::string tool_version;             ///< recorded in the header's provenance
  progress_fn progress;
};

struct compress_result {
  geometry geom;
  dtype type = dtype::u8;
  codec_params codec;
  std::uint64_t samples_per_chunk = 0, chunks = 0;
  std::uint64_t input_bytes = 0, archive_bytes = 0, values = 0;
  std::optional<quality> q;             ///< when measured
  double seconds = 0.0;                 ///< wall time of the whole operation
  double ratio() const { return archive_bytes ? double(input_bytes) / double(archive_bytes) : 0; }
  double bits_per_value() const { return values ? 8.0 * double(archive_bytes) / double(values) : 0; }
  nlohmann::json to_json() const;
};

/** Compress a .npy file (or "-") into an archive (or "-"). */
compress_result compress_npy(const std::string& input, const std::string& output,
                             backend& be, const compress_options& options);

struct decompress_options {
  std::uint64_t first = 0;                ///< first sample
  std::optional<std::uint64_t> end;       ///< one past the last sample; default: all
  std::string labels_out;                 ///< write the labels side array here (.npy)
  bool overwrite = false;
  progress_fn progress;
};

struct decompress_result {
  geometry geom;       ///< of the output (samples = the range written)
  dtype type = dtype::u8;
  std::uint64_t output_bytes = 0;
  double seconds = 0.0;
  nlohmann::json to_json() const;
};

/** Decode an archive (or "-") into a .npy file (or "-") of the original dtype and layout. */
decompress_result decompress_to_npy(const std::string& input, const std::string& output,
                                    backend& be, const decompress_options& options);

/** Everything `dctchop info` shows: header, index summary, footer figures. */
nlohmann::json archive_info(const std::string& input);

}  // namespace dctchop::formats
