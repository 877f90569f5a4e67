// The backend that starts in the background (backend_options::start_in_background): calls
// before the start run on the stopgap, calls after it on the started backend, with the same
// bytes; a start that fails is an error for a backend asked for by name and a note for
// `automatic`. The CUDA start itself is the GPU tests' (CudaSelection); these start CPU
// backends, so that every path runs here, under the sanitizers too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/error.hpp"
#include "dctchop/host_memory.hpp"
#include "starting_backend.hpp"
#include "test_util.hpp"

namespace dctchop {
namespace {

using detail::starting_backend;

/** A CPU backend that counts its calls and says `name`. */
class counting_backend final : public backend {
 public:
  explicit counting_backend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void encode(const codec_params& p, const const_sample_view& in,
              std::span<std::byte> coeffs) override {
    ++calls;
    cpu_->encode(p, in, coeffs);
  }
  void decode(const codec_params& p, std::span<const std::byte> coeffs,
              const sample_view& out) override {
    ++calls;
    cpu_->decode(p, coeffs, out);
  }
  std::atomic<int> calls{0};

 private:
  std::string name_;
  std::unique_ptr<backend> cpu_ = make_backend(backend_kind::cpu, {1});
};

/** u8 images and their coefficients from a plain CPU backend. */
struct job {
  geometry g = test::shape_of(layout::nhwc, 6, 20, 28, 3);
  codec_params p;
  std::vector<std::uint8_t> values;
  std::vector<std::byte> want;
  job() {
    p.chop = 3;
    p.coeff = coeff_type::f16;
    p.offset = 128;
    std::mt19937 rng(11);
    values.resize(g.samples * g.values_per_sample());
    for (auto& v : values) v = static_cast<std::uint8_t>(rng() & 0xff);
    want.resize(g.samples * coeff_bytes_per_sample(p, g));
    make_backend(backend_kind::cpu)->encode(p, view(), want);
  }
  const_sample_view view() const {
    return make_view(g, dtype::u8, static_cast<const void*>(values.data()), g.samples);
  }
  /** `be`'s coefficients equal the CPU's, and its decode of them the CPU's decode. */
  void check(backend& be) const {
    std::vector<std::byte> got(want.size());
    be.encode(p, view(), got);
    EXPECT_EQ(got, want);
    std::vector<std::uint8_t> back(values.size()), cpu_back(values.size());
    be.decode(p, got, make_view(g, dtype::u8, static_cast<void*>(back.data()), g.samples));
    make_backend(backend_kind::cpu)
        ->decode(p, want, make_view(g, dtype::u8, static_cast<void*>(cpu_back.data()), g.samples));
    EXPECT_EQ(back, cpu_back);
  }
};

/** A start that waits for `go` and then makes `made` (or throws what `go` carries). */
struct gated_start {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  counting_backend* made = nullptr;
  /** Opens the gate if the test did not: declared after the backend, it runs before the
   *  backend's destructor, which waits for the start (a failed assertion must not hang). */
  struct opener {
    gated_start& s;
    ~opener() {
      if (s.gate.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        try {
          s.go.set_value();
        } catch (const std::future_error&) {
          // set by the test meanwhile
        }
      }
    }
  };
  starting_backend::start_fn fn(std::string name = "cuda") {
    return [this, name, gate = gate]() -> std::unique_ptr<backend> {
      gate.get();  // rethrows an error set on `go`
      auto b = std::make_unique<counting_backend>(name);
      made = b.get();
      return b;
    };
  }
};

std::unique_ptr<counting_backend> stopgap() {
  return std::make_unique<counting_backend>("cpu");
}

TEST(StartingBackend, CallsBeforeTheStartRunOnTheStopgapAndAfterItOnTheStartedBackend) {
  const job j;
  gated_start start;
  auto gap = stopgap();
  counting_backend* gap_ptr = gap.get();
  const auto memory = large_page_memory();
  starting_backend be("cuda", 1, start.fn("cuda (started)"), std::move(gap), memory, nullptr);
  const gated_start::opener open{start};
  EXPECT_EQ(be.name(), "cuda");  // what was asked for, while it starts
  EXPECT_EQ(be.threads(), 1);
  EXPECT_EQ(be.host_memory(), memory);
  j.check(be);  // the start waits: both calls on the stopgap
  EXPECT_EQ(gap_ptr->calls.load(), 2);
  EXPECT_EQ(be.stopgap_calls(), 2u);
  start.go.set_value();
  be.wait_started();
  ASSERT_NE(start.made, nullptr);
  EXPECT_EQ(be.name(), "cuda (started)");
  j.check(be);
  EXPECT_EQ(start.made->calls.load(), 2);
  EXPECT_EQ(gap_ptr->calls.load(), 2) << "no call on the stopgap once started";
  EXPECT_EQ(be.stopgap_calls(), 2u);
}

TEST(StartingBackend, ABackendAskedForByNameThatCannotStartThrowsItsErrorFromEveryCallAfter) {
  const job j;
  gated_start start;
  starting_backend be("cuda", 1, start.fn(), stopgap(), nullptr, nullptr);
  const gated_start::opener open{start};
  j.check(be);  // before the failure is known: the stopgap's bytes, which are the same
  start.go.set_exception(std::make_exception_ptr(
      error(errc::backend_unavailable, "no CUDA device is available; use --backend cpu")));
  for (int i = 0; i < 2; ++i) {
    try {
      be.wait_started();
      ADD_FAILURE() << "wait_started() took a backend that could not start";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::backend_unavailable);
      EXPECT_STREQ(e.what(), "no CUDA device is available; use --backend cpu");
    }
  }
  std::vector<std::byte> got(j.want.size());
  EXPECT_THROW(be.encode(j.p, j.view(), got), error);
  EXPECT_EQ(be.name(), "cuda");
}

TEST(StartingBackend, AutomaticGoesOnWithTheStopgapAndTellsWhyOnce) {
  const job j;
  gated_start start;
  std::vector<std::string> told;
  starting_backend be("cuda", 1, start.fn(), stopgap(), nullptr,
                      [&](const std::string& why) { told.push_back(why); });
  const gated_start::opener open{start};
  start.go.set_exception(std::make_exception_ptr(
      error(errc::backend_unavailable, "the GPU (sm_70) runs none of the kernels")));
  be.wait_started();  // no error: the CPU goes on
  j.check(be);
  be.wait_started();
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0], "the GPU (sm_70) runs none of the kernels");
  EXPECT_EQ(be.name(), "cpu");
}

TEST(StartingBackend, AutomaticWithNoDeviceTellsNothingAndOtherErrorsAreErrors) {
  const job j;
  std::vector<std::string> told;
  const auto tell = [&](const std::string& why) { told.push_back(why); };
  {
    starting_backend be(
        "cuda", 1, [] { return std::unique_ptr<backend>(); }, stopgap(), nullptr, tell);
    be.wait_started();
    j.check(be);
    EXPECT_EQ(be.name(), "cpu");
  }
  EXPECT_TRUE(told.empty());
  // Not "cannot run here" but a fault (out of memory, a driver error): no silent fallback.
  starting_backend be(
      "cuda", 1, []() -> std::unique_ptr<backend> { throw error(errc::io, "driver fault"); },
      stopgap(), nullptr, tell);
  EXPECT_THROW(be.wait_started(), error);
  std::vector<std::byte> got(j.want.size());
  EXPECT_THROW(be.encode(j.p, j.view(), got), error);
  EXPECT_TRUE(told.empty());
  // By name, a start that made nothing is an error too (never the stopgap for good).
  starting_backend nothing(
      "cuda", 1, [] { return std::unique_ptr<backend>(); }, stopgap(), nullptr, nullptr);
  EXPECT_THROW(nothing.wait_started(), error);
}

TEST(StartingBackend, DestroyedWhileStartingItWaitsForTheStartToEnd) {
  std::atomic<bool> ended{false};
  {
    starting_backend be(
        "cuda", 1,
        [&]() -> std::unique_ptr<backend> {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          ended = true;
          return std::make_unique<counting_backend>("cuda");
        },
        stopgap(), nullptr, nullptr);
  }
  EXPECT_TRUE(ended.load()) << "the start's thread was left running";
}

TEST(StartingBackend, CallsFromSeveralThreadsAcrossTheStartEachGetTheSameBytes) {
  // A loader's threads sharing one backend, while it switches from the stopgap.
  const job j;
  gated_start start;
  starting_backend be("cuda", 1, start.fn(), stopgap(), nullptr, nullptr);
  const gated_start::opener open{start};
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::vector<std::byte> got(j.want.size());
        be.encode(j.p, j.view(), got);
        if (got != j.want) ++wrong;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  start.go.set_value();
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
  be.wait_started();
  ASSERT_NE(start.made, nullptr);
  EXPECT_EQ(start.made->calls.load() + static_cast<int>(be.stopgap_calls()), 80);
}

TEST(StartingBackend, WithoutAGpuTheOptionMakesTheBackendAsWithoutIt) {
  // A machine without a GPU's device file: the CPU at once (a worker per core), and `cuda`
  // its error at once (the same exit 7 as without the option), not a thread's later.
  backend_options o;
  o.start_in_background = true;
  auto cpu = make_backend(backend_kind::cpu, o);
  EXPECT_EQ(cpu->name(), "cpu");
  cpu->wait_started();
  if (std::filesystem::exists("/dev/nvidia0") || std::filesystem::exists("/dev/dxg")) {
    GTEST_SKIP() << "this machine may have a GPU: the GPU tests (CudaSelection) start it";
  }
  EXPECT_EQ(make_backend(backend_kind::automatic, o)->name(), "cpu");
  try {
    make_backend(backend_kind::cuda, o);
    ADD_FAILURE() << "a CUDA backend without a device";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::backend_unavailable);
  }
}

}  // namespace
}  // namespace dctchop
