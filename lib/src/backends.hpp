// Internal: constructors of the compiled-in backends.
#pragma once

#include <memory>
#include <string>

#include "dctchop/codec.hpp"

namespace dctchop::detail {

std::unique_ptr<backend> make_cpu_backend(const backend_options& options);
std::string cpu_backend_description();

}  // namespace dctchop::detail
