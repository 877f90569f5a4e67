// dctchop: compress image and tensor datasets with blockwise DCT+Chop.
// This file parses arguments, prints reports and chooses exit codes; the codec and the formats
// live in lib/ and formats/.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/formats/archive.hpp"
#include "dctchop/formats/pipeline.hpp"
#include "dctchop_version.hpp"
#include "progress.hpp"

namespace {

using namespace dctchop;

// Exit codes, documented in README.md ("Exit codes").
enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,
  exit_usage = 2,
  exit_bad_input = 3,
  exit_corrupt = 4,
  exit_io = 5,
  exit_exists = 6,
  exit_backend = 7,
  exit_interrupted = 130,
};

int exit_for(errc c) {
  switch (c) {
    case errc::invalid_argument: return exit_usage;
    case errc::bad_input: case errc::out_of_range: case errc::unsupported_version:
      return exit_bad_input;
    case errc::corrupt: return exit_corrupt;
    case errc::io: return exit_io;
    case errc::output_exists: return exit_exists;
    case errc::backend_unavailable: return exit_backend;
    case errc::internal: return exit_internal;
  }
  return exit_internal;
}

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

struct interrupted {};

const char* k_examples = R"(
Examples:
  dctchop compress train.npy -o train.dcz              # u8 images, block 8, chop 4, f16
  dctchop compress fields.npy -o f.dcz --chop 2 --coeff bf16
  dctchop compress images.npy -o - --json | ssh host 'cat > images.dcz'
  dctchop info train.dcz --json
  dctchop decompress train.dcz -o check.npy --samples 0:100
  cat train.dcz | dctchop decompress - -o - > all.npy

Exit codes: 0 ok, 2 usage, 3 bad input or format, 4 corrupt archive, 5 I/O error,
            6 output exists (use -f), 7 backend unavailable, 130 interrupted.
)";

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string psnr_text(const std::optional<double>& p) {
  return p ? fmt::format("{:.2f} dB", *p) : std::string("inf (lossless)");
}

std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string r;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += 'x';
    r += std::to_string(s[i]);
  }
  return r;
}

/** Parse "A:B", "A:", ":B" or "A" (one sample) into [first, end). */
void parse_range(const std::string& s, std::uint64_t& first, std::optional<std::uint64_t>& end) {
  auto num = [&](const std::string& t) -> std::uint64_t {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos) {
      throw error(errc::invalid_argument, "--samples " + s + ": expected A:B with A < B");
    }
    try {
      return std::stoull(t);
    } catch (const std::exception&) {
      throw error(errc::invalid_argument, "--samples " + s + ": number out of range");
    }
  };
  auto colon = s.find(':');
  if (colon == std::string::npos) {
    first = num(s);
    end = first + 1;
    return;
  }
  std::string a = s.substr(0, colon), b = s.substr(colon + 1);
  first = a.empty() ? 0 : num(a);
  if (!b.empty()) end = num(b);
}

void check_signal() {
  if (g_signal.load() != 0) throw interrupted{};
}

backend_kind parse_backend(const std::string& s) {
  if (s == "cpu") return backend_kind::cpu;
  if (s == "cuda") return backend_kind::cuda;
  return backend_kind::automatic;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe becomes an I/O error, not a silent death
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  auto log = spdlog::stderr_logger_st("dctchop");
  log->set_pattern("dctchop: %v");

  CLI::App app{"dctchop: compress image and tensor datasets with blockwise DCT+Chop"};
  app.footer(k_examples);
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("dctchop ") + DCTCHOP_VERSION_STRING + "\nbackends: " + [] {
                         std::string s;
                         for (const auto& b : compiled_backends()) s += (s.empty() ? "" : ", ") + b;
                         return s;
                       }() + "\narchive format: " + std::to_string(formats::archive_major) + "." +
                           std::to_string(formats::archive_minor));

  // ---- compress
  std::string c_in, c_out, c_coeff, c_layout = "auto", c_labels, c_backend = "auto";
  int c_block = 8, c_chop = 4, c_threads = 0;
  double c_chunk_mb = 4.0;
  bool c_force = false, c_quiet = false, c_json = false, c_no_quality = false;
  auto* cmp = app.add_subcommand("compress", "compress a .npy dataset into a .dcz archive");
  cmp->add_option("input", c_in, "input .npy file, or - for stdin")->required();
  cmp->add_option("-o,--output", c_out, "output archive, or - for stdout (default: INPUT.dcz)");
  cmp->add_option("--block", c_block, "block size B: 4, 8, 16 or 32")
      ->check(CLI::IsMember({4, 8, 16, 32}))
      ->capture_default_str();
  cmp->add_option("--chop", c_chop, "coefficients kept per axis K, 1..B")->capture_default_str();
  cmp->add_option("--coeff", c_coeff,
                  "coefficient type: f16, bf16, f32, i16 (default f16 for u8, f32 otherwise)")
      ->check(CLI::IsMember({"f16", "bf16", "f32", "i16"}));
  cmp->add_option("--layout", c_layout, "HW, NHW, NHWC, NCHW or auto")
      ->check(CLI::IsMember({"auto", "HW", "NHW", "NHWC", "NCHW"}, CLI::ignore_case))
      ->capture_default_str();
  cmp->add_option("--threads", c_threads, "CPU threads (0: every core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmp->add_option("--chunk-mb", c_chunk_mb, "coefficient MiB per chunk")->capture_default_str();
  cmp->add_option("--labels", c_labels, "per-sample labels (.npy) stored losslessly");
  cmp->add_option("--backend", c_backend, "cpu, cuda or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  cmp->add_flag("-f,--force", c_force, "overwrite an existing output");
  cmp->add_flag("-q,--quiet", c_quiet, "print nothing but errors");
  cmp->add_flag("--json", c_json, "print the report as JSON (stdout, or stderr with -o -)");
  cmp->add_flag("--no-quality", c_no_quality, "skip measuring PSNR (faster)");

  // ---- decompress
  std::string d_in, d_out, d_samples, d_labels_out, d_backend = "auto";
  int d_threads = 0;
  bool d_force = false, d_quiet = false, d_json = false;
  auto* dec = app.add_subcommand("decompress", "decode a .dcz archive into a .npy file");
  dec->add_option("input", d_in, "input archive, or - for stdin")->required();
  dec->add_option("-o,--output", d_out, "output .npy file, or - for stdout")->required();
  dec->add_option("--samples", d_samples, "sample range A:B (half-open; A: or :B allowed)");
  dec->add_option("--labels-out", d_labels_out, "also write the stored labels to this .npy");
  dec->add_option("--threads", d_threads, "CPU threads (0: every core)")
      ->check(CLI::NonNegativeNumber);
  dec->add_option("--backend", d_backend, "cpu, cuda or auto")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  dec->add_flag("-f,--force", d_force, "overwrite an existing output");
  dec->add_flag("-q,--quiet", d_quiet, "print nothing but errors");
  dec->add_flag("--json", d_json, "print the report as JSON");

  // ---- info
  std::string i_in;
  bool i_json = false;
  auto* inf = app.add_subcommand("info", "describe a .dcz archive");
  inf->add_option("input", i_in, "archive, or - for stdin")->required();
  inf->add_flag("--json", i_json, "print JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? exit_ok : exit_usage;
  }

  try {
    if (*cmp) {
      if (c_out.empty()) {
        if (c_in == "-") {
          c_out = "-";
        } else {
          std::string stem = c_in;
          if (stem.size() > 4 && stem.substr(stem.size() - 4) == ".npy") stem.resize(stem.size() - 4);
          c_out = stem + ".dcz";
        }
      }
      if (c_out == "-" && ::isatty(STDOUT_FILENO) == 1) {
        throw error(errc::invalid_argument, "refusing to write an archive to a terminal");
      }
      formats::compress_options o;
      o.block = c_block;
      o.chop = c_chop;
      if (!c_coeff.empty()) o.coeff = parse_coeff_type(c_coeff);
      o.lay = parse_layout(c_layout).value_or(layout::automatic);
      o.chunk_mb = c_chunk_mb;
      o.labels_path = c_labels;
      o.overwrite = c_force;
      o.measure_quality = !c_no_quality;
      o.tool_version = DCTCHOP_VERSION_STRING;
      app::progress_bar bar("compressing", !c_quiet);
      o.progress = [&](std::uint64_t d, std::uint64_t t) {
        check_signal();
        bar.update(d, t);
      };
      auto be = make_backend(parse_backend(c_backend), {c_threads});
      auto r = formats::compress_npy(c_in, c_out, *be, o);
      bar.clear();
      if (c_json) {
        auto j = r.to_json();
        j["input"] = c_in;
        j["output"] = c_out;
        j["backend"] = be->name();
        (c_out == "-" ? std::cerr : std::cout) << j.dump(2) << "\n";
      } else if (!c_quiet) {
        log->info("{} -> {}: {} {} {}, block {} chop {} {}", c_in == "-" ? "<stdin>" : c_in,
                  c_out == "-" ? "<stdout>" : c_out, shape_text(r.geom.shape()),
                  to_string(r.type), to_string(r.geom.lay), r.codec.block, r.codec.chop,
                  to_string(r.codec.coeff));
        log->info("  {} -> {}: ratio {:.2f}x ({:.3f} bits/value), PSNR {}, max error {:g}",
                  human_bytes(r.input_bytes), human_bytes(r.archive_bytes), r.ratio(),
                  r.bits_per_value(), r.q ? psnr_text(r.q->psnr_db) : "not measured",
                  r.q ? r.q->max_abs_error : 0.0);
        log->info("  {:.3f} s, {:.3f} GB/s of input ({} chunks of {} samples, backend {})",
                  r.seconds, r.seconds > 0 ? double(r.input_bytes) / r.seconds / 1e9 : 0.0,
                  r.chunks, r.samples_per_chunk, be->name());
      }
    } else if (*dec) {
      if (d_out == "-" && ::isatty(STDOUT_FILENO) == 1) {
        throw error(errc::invalid_argument, "refusing to write binary data to a terminal");
      }
      formats::decompress_options o;
      if (!d_samples.empty()) parse_range(d_samples, o.first, o.end);
      o.labels_out = d_labels_out;
      o.overwrite = d_force;
      app::progress_bar bar("decompressing", !d_quiet);
      o.progress = [&](std::uint64_t d, std::uint64_t t) {
        check_signal();
        bar.update(d, t);
      };
      auto be = make_backend(parse_backend(d_backend), {d_threads});
      auto r = formats::decompress_to_npy(d_in, d_out, *be, o);
      bar.clear();
      if (d_json) {
        auto j = r.to_json();
        j["input"] = d_in;
        j["output"] = d_out;
        (d_out == "-" ? std::cerr : std::cout) << j.dump(2) << "\n";
      } else if (!d_quiet) {
        log->info("{} -> {}: {} {}, {} in {:.3f} s ({:.3f} GB/s)", d_in == "-" ? "<stdin>" : d_in,
                  d_out == "-" ? "<stdout>" : d_out, shape_text(r.geom.shape()),
                  to_string(r.type), human_bytes(r.output_bytes), r.seconds,
                  r.seconds > 0 ? double(r.output_bytes) / r.seconds / 1e9 : 0.0);
      }
    } else if (*inf) {
      auto j = formats::archive_info(i_in);
      if (i_json) {
        std::cout << j.dump(2) << "\n";
      } else {
        const auto& c = j["codec"];
        std::cout << fmt::format("file:        {}\n", j["file"].get<std::string>());
        std::cout << fmt::format("format:      dctchop archive {}\n", j["version"].get<std::string>());
        std::cout << fmt::format("data:        {} {} {}\n",
                                 shape_text(j["shape"].get<std::vector<std::uint64_t>>()),
                                 j["dtype"].get<std::string>(), j["layout"].get<std::string>());
        std::cout << fmt::format("codec:       block {} chop {} coeff {} offset {:g}\n",
                                 c["block"].get<int>(), c["chop"].get<int>(),
                                 c["coeff"].get<std::string>(), c["offset"].get<double>());
        std::cout << fmt::format("chunks:      {} of up to {} samples\n",
                                 j["chunks"].get<std::uint64_t>(),
                                 j["chunking"]["samples_per_chunk"].get<std::uint64_t>());
        if (j.contains("ratio")) {
          std::cout << fmt::format(
              "size:        {} -> {}, ratio {:.2f}x, {:.3f} bits/value\n",
              human_bytes(j["input_bytes"].get<std::uint64_t>()),
              human_bytes(j["archive_bytes"].get<std::uint64_t>()), j["ratio"].get<double>(),
              j["bits_per_value"].get<double>());
        }
        if (j.contains("quality")) {
          const auto& q = j["quality"];
          std::optional<double> p;
          if (!q["psnr_db"].is_null()) p = q["psnr_db"].get<double>();
          std::cout << fmt::format("quality:     PSNR {}, RMSE {:g}, max error {:g}\n",
                                   psnr_text(p), q["rmse"].get<double>(),
                                   q["max_abs_error"].get<double>());
        }
        for (const auto& s : j["side_arrays"]) {
          std::cout << fmt::format("side array:  {} {} {}\n", s["name"].get<std::string>(),
                                   s["descr"].get<std::string>(),
                                   shape_text(s["shape"].get<std::vector<std::uint64_t>>()));
        }
        const auto& p = j["provenance"];
        if (p.contains("source")) {
          std::cout << fmt::format("provenance:  {} from {} at {}\n",
                                   p.value("tool", std::string("?")),
                                   p.value("source", std::string("?")),
                                   p.value("created", std::string("?")));
        }
      }
    }
  } catch (const interrupted&) {
    log->error("interrupted; no output was written");
    return exit_interrupted;
  } catch (const error& e) {
    log->error("error: {}", e.what());
    return exit_for(e.code());
  } catch (const std::bad_alloc&) {
    log->error("error: out of memory");
    return exit_internal;
  } catch (const std::exception& e) {
    log->error("internal error: {}", e.what());
    return exit_internal;
  }
  return exit_ok;
}
