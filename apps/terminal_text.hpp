// Text for a terminal: what dctchop prints for people (messages on stderr, info's and eval's
// reports) may carry names from the command line or from an archive's header, which a
// downloaded archive sets as it likes. Control characters in them are shown escaped, so that
// a name cannot move the cursor, set the terminal's title or split a one-line message.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace dctchop::app {

/** `s` with every control character (C0, DEL, C1 as UTF-8, and the bidirectional overrides,
 *  embeddings and isolates, which reorder what follows them) and every byte that is not part
 *  of valid UTF-8 written as an escape: \n, \r, \t, \xNN or \uNNNN. Printable text, UTF-8
 *  included, is unchanged. */
std::string printable(std::string_view s);

/** A logger "dctchop" on stderr that prints each message as "dctchop: " + printable(message). */
std::shared_ptr<spdlog::logger> make_stderr_logger();

}  // namespace dctchop::app
