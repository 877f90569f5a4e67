// Crash safety (issue 7): whatever stops dctchop midway (SIGKILL, a full file system, a file
// size limit, a read-only folder, a full device on stdout) leaves no file at the output path,
// no temporary file beside it, an existing output untouched and the input unchanged; every
// refusal is one clear line on stderr and exit code 5 (I/O), as the README documents.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "dctchop/formats/file_io.hpp"
#include "test_util.hpp"

namespace dctchop {
namespace {

using test::describe;
using test::read_bytes;
using test::sh;
using test::temp_dir;

/** dir/in.npy: n random u8 samples of 64x64 (random, so the archive stays about half the size
 *  of the input: f16 at chop 4). */
void make_input(const temp_dir& dir, std::uint64_t n, const std::string& name = "in.npy") {
  std::vector<std::uint8_t> v(n * 64 * 64);
  std::mt19937 rng(7);
  for (auto& x : v) x = static_cast<std::uint8_t>(rng());
  test::save_npy(dir.file(name), dtype::u8, {n, 64, 64}, v);
}

/** Whether this process may make mount namespaces (root, with util-linux's unshare): then
 *  the tests mount a small tmpfs or a read-only bind mount that only the command sees. */
bool can_mount() {
  static const bool ok = ::geteuid() == 0 &&
                         std::system("unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs /mnt' "
                                     ">/dev/null 2>&1") == 0;
  return ok;
}

/** Skips a test that hides /proc from dctchop alone (a mount namespace of its own), where it
 *  cannot: without root and unshare, or under the sanitizers, whose runtimes read /proc. */
#if defined(DCTCHOP_TEST_ASAN) || defined(DCTCHOP_TEST_TSAN)
#define DCTCHOP_SKIP_UNLESS_PROC_CAN_BE_HIDDEN() \
  GTEST_SKIP() << "the sanitizers' runtimes read /proc themselves"
#else
#define DCTCHOP_SKIP_UNLESS_PROC_CAN_BE_HIDDEN() \
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare, to hide /proc from dctchop alone"
#endif

/** stderr is a single line that names `what`. */
void expect_one_line_naming(const test::command_result& r, const std::string& what) {
  EXPECT_NE(r.err.find(what), std::string::npos) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
}

/** `dctchop ARGS` SIGKILLed mid-way (test::signal_midway), once it has written part of
 *  `output` and waits for more. */
std::string kill_midway(const std::string& args, const std::string& feed, std::uint64_t bytes,
                        const std::string& output) {
  return test::signal_midway("DCTCHOP " + args, feed, bytes, output, "KILL", "sleep 0.3; ");
}

TEST(CrashSafety, SigkillMidwayThroughACompressLeavesNoFileAndAnExistingOutputUntouched) {
  temp_dir dir;
  make_input(dir, 4096);  // 16 MiB
  for (const bool existing : {false, true}) {
    if (existing) test::write_bytes(dir.file("out.dcz"), "the user's old archive");
    // Half the input.
    const auto r =
        sh(dir, kill_midway("compress - -o out.dcz -f --chunk-mb 1", "in.npy", 8500000, "out.dcz"));
    EXPECT_NE(r.out.find("rc=137"), std::string::npos) << describe(r);
    if (existing) {
      EXPECT_EQ(dir.entries(), (std::vector<std::string>{"in.npy", "out.dcz"}));
      EXPECT_EQ(read_bytes(dir.file("out.dcz")), "the user's old archive");
    } else {
      EXPECT_EQ(dir.entries(), std::vector<std::string>{"in.npy"});
    }
  }
}

TEST(CrashSafety, SigkillMidwayThroughADecompressLeavesNoFile) {
  temp_dir dir;
  make_input(dir, 4096);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q --no-quality --chunk-mb 1").status, 0);
  const auto r = sh(dir, kill_midway("decompress - -o out.npy", "a.dcz", 5000000, "out.npy"));
  EXPECT_NE(r.out.find("rc=137"), std::string::npos) << describe(r);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
}

TEST(CrashSafety, AnHdf5OutputsTemporaryFileCannotBeRedirectedByWhoeverMayWriteItsFolder) {
  // HDF5 opens its file by name. The temporary file is in a folder of its own (0700) that
  // dctchop reaches through its descriptor: the folder's name, swapped midway for a symlink
  // to a folder holding the victim's file of the output's name, changes nothing. (A temporary
  // file reopened by its name, as before, swapped for a symlink, had HDF5 truncate and write
  // the victim's file, and the link renamed into the output's place.)
  temp_dir dir;
  make_input(dir, 1024);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q --no-quality --chunk-mb 1 && "
                    "DCTCHOP decompress a.dcz -o want.npy -q && mkdir victim && "
                    "echo precious > victim/out.h5").status, 0);
  const auto size = std::filesystem::file_size(dir.file("a.dcz"));
  const auto r = sh(dir, "mkfifo f; DCTCHOP decompress - -o out.h5 -q < f & P=$!; exec 3>f; "
                         "head -c " + std::to_string(size / 2) + " a.dcz >&3; " +
                         test::wait_for_output("out.h5") +
                         "T=$(ls -d .out.h5.tmp*); stat -c '%F %a' \"$T\"; mv \"$T\" moved; "
                         "ln -s victim \"$T\"; tail -c +" + std::to_string(size / 2 + 1) +
                         " a.dcz >&3; exec 3>&-; wait $P; echo \"rc=$?\"; rm \"$T\" f");
  EXPECT_NE(r.out.find("directory 700"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("rc=0"), std::string::npos) << describe(r);
  EXPECT_EQ(read_bytes(dir.file("victim/out.h5")), "precious\n");
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("moved")));  // the file left it for its place
  ASSERT_FALSE(std::filesystem::is_symlink(dir.file("out.h5")));
  // Its data is the archive's: read back through chop 8 (lossless for u8 in f32).
  const auto same = sh(dir, "DCTCHOP compress out.h5:/data -o back.dcz --chop 8 --coeff f32 -q && "
                            "DCTCHOP decompress back.dcz -o back.npy -q && cmp back.npy want.npy");
  EXPECT_EQ(same.status, 0) << describe(same);
}

TEST(CrashSafety, WithoutProcAnHdf5OutputIsRefusedNotOpenedThroughANameOthersMayChange) {
  // HDF5 opens its temporary file through /proc/self/fd/N/NAME; without /proc that was the
  // folder's name, which a tester swapped for a folder holding a symlink to root's file.
  DCTCHOP_SKIP_UNLESS_PROC_CAN_BE_HIDDEN();
  temp_dir dir;
  make_input(dir, 16);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  const auto r = sh(dir, "unshare -m sh -c 'mount -t tmpfs none /proc && "
                         "DCTCHOP decompress a.dcz -o out.h5'");
  EXPECT_EQ(r.status, 5) << describe(r);
  EXPECT_NE(r.err.find("out.h5: an HDF5 output needs /proc"), std::string::npos) << describe(r);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
  EXPECT_EQ(sh(dir, "unshare -m sh -c 'mount -t tmpfs none /proc && "
                    "DCTCHOP decompress a.dcz -o out.npy -q'").status, 0)
      << "other outputs need no /proc";
}

TEST(CrashSafety, WithoutOTmpfileAFileReplacedWithForceIsNeverReadableByOthersMeanwhile) {
  // Without O_TMPFILE (here: without /proc, which naming an unnamed file needs) the output is
  // a named temporary file first. It was made 0666 less the umask and only then given the
  // replaced file's mode: a file of 0600 replaced, another user could open its successor
  // meanwhile (a tester did, under strace) and read it whole later. Now it is made 0600 when
  // it replaces one; a new output's is 0666 less the umask, as any new file's.
  DCTCHOP_SKIP_UNLESS_PROC_CAN_BE_HIDDEN();
  temp_dir dir;
  make_input(dir, 16);
  if (sh(dir, "strace -o /dev/null true").status != 0) GTEST_SKIP() << "needs strace";
  for (const bool replace : {false, true}) {
    const auto r = sh(dir, std::string("umask 022; unshare -m sh -c 'mount -t tmpfs none /proc && "
                                       "strace -f -o t.txt -e trace=openat,fchmod DCTCHOP compress "
                                       "in.npy -o a.dcz -q") + (replace ? " -f" : "") + "'");
    ASSERT_EQ(r.status, 0) << describe(r);
    std::string made, later;
    for (const auto& c : test::read_strace(dir.file("t.txt"))) {
      if (c.name == "openat" && c.path().find(".a.dcz.tmp") != std::string::npos) {
        made = c.after_path();
      }
      if (c.name == "fchmod" && !made.empty()) later += c.rest;
    }
    std::filesystem::remove(dir.file("t.txt"));
    EXPECT_NE(made.find(replace ? "O_CREAT|O_EXCL|O_CLOEXEC, 0600)" : "O_CREAT|O_EXCL|O_CLOEXEC, "
                                                                       "0666)"),
              std::string::npos) << replace << ": " << made;
    if (replace) EXPECT_NE(later.find("0600"), std::string::npos) << later;  // (the old mode)
    EXPECT_EQ(std::filesystem::status(dir.file("a.dcz")).permissions(),
              std::filesystem::perms(replace ? 0600 : 0644)) << replace;
    if (!replace) std::filesystem::permissions(dir.file("a.dcz"), std::filesystem::perms(0600));
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"}));
}

TEST(CrashSafety, PastTheFileSizeLimitEveryOutputKindFailsWithAnIoErrorAndLeavesNothing) {
  temp_dir dir;
  make_input(dir, 256);  // 1 MiB in, about 0.5 MiB of archive
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  const std::string before = read_bytes(dir.file("in.npy"));
  // ulimit -f counts 512-byte blocks in sh: 128 KiB, below every output here.
  for (const std::string& args : {std::string("compress in.npy -o out.dcz"),
                                  std::string("decompress a.dcz -o out.npy"),
                                  std::string("decompress a.dcz -o out.h5:/x"),
                                  std::string("decompress a.dcz -o out.raw")}) {
    const auto r = sh(dir, "ulimit -f 256; DCTCHOP " + args);
    EXPECT_EQ(r.status, 5) << args << "\n" << describe(r);
    expect_one_line_naming(r, "out.");
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy"})) << args;
  }
  EXPECT_EQ(read_bytes(dir.file("in.npy")), before);
}

TEST(CrashSafety, DataAndALabelsFileAppearTogetherOrNeitherChanges) {
  // Labels of 800 KiB and data of 13 KiB under a 50 KiB file size limit: the labels cannot be
  // written. With -f over an old pair, both old files stay as they were (the new data was
  // once named first, and the labels failed after, leaving new data beside old labels); the
  // same for every output kind that takes a labels file.
  temp_dir dir;
  const std::uint64_t n = 50;
  std::vector<std::uint8_t> x(n * 16 * 16, 7);
  std::vector<float> y(n * 4096, 0.5f);
  test::save_npy(dir.file("x.npy"), dtype::u8, {n, 16, 16}, x);
  test::save_npy(dir.file("y.npy"), dtype::f32, {n, 4096}, y);
  ASSERT_EQ(sh(dir, "DCTCHOP compress x.npy --labels y.npy -o a.dcz -q").status, 0);
  for (const std::string& pair : {std::string("out.npy --labels-out lab.npy"),
                                  std::string("out.h5:/x --labels-out lab.npy"),
                                  std::string("out.npz --labels-out lab.npz"),
                                  std::string("out.bin --raw --labels-out lab.npy")}) {
    const std::string out = pair.substr(0, pair.find_first_of(": ")),
                      lab = pair.substr(pair.rfind(' ') + 1);
    test::write_bytes(dir.file(out), "old data");
    test::write_bytes(dir.file(lab), "old labels");
    const auto r = sh(dir, "ulimit -f 100; DCTCHOP decompress a.dcz -o " + pair + " -f");
    EXPECT_EQ(r.status, 5) << pair << "\n" << describe(r);
    // with the reason, HDF5's writes too ("/labels: write failed" said none)
    EXPECT_NE(r.err.find("File too large"), std::string::npos) << pair << "\n" << describe(r);
    EXPECT_EQ(read_bytes(dir.file(out)), "old data") << pair;
    EXPECT_EQ(read_bytes(dir.file(lab)), "old labels") << pair;
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", lab, out, "x.npy", "y.npy"}))
        << pair;
    std::filesystem::remove(dir.file(out));
    std::filesystem::remove(dir.file(lab));
  }
}

TEST(CrashSafety, AnHdf5OutputCutShortAtItsMetadataSaysSoAndLeavesNothing) {
  // HDF5 writes its metadata (the dataset's header) last, when the file is flushed: limits
  // just under the finished file's size fail there, after all the data.
  temp_dir dir;
  make_input(dir, 256);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  ASSERT_EQ(sh(dir, "DCTCHOP decompress a.dcz -o full.h5 -q").status, 0);
  const auto size = std::filesystem::file_size(dir.file("full.h5"));
  std::size_t at_metadata = 0;
  for (std::uintmax_t blocks = size / 512 - 16; blocks < (size + 511) / 512; ++blocks) {
    const auto r = sh(dir, "ulimit -f " + std::to_string(blocks) +
                               "; DCTCHOP decompress a.dcz -o out.h5 -q");
    ASSERT_EQ(r.status, 5) << blocks << " blocks of " << size << " bytes\n" << describe(r);
    expect_one_line_naming(r, "out.h5");
    EXPECT_NE(r.err.find("File too large"), std::string::npos) << describe(r);
    at_metadata += r.err.find("cannot write the HDF5 file's metadata") != std::string::npos;
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "full.h5", "in.npy"})) << blocks;
  }
  EXPECT_GE(at_metadata, 1u) << "no limit fell in the metadata: nothing here tested that path";
}

/** DCTCHOP `args` with full/ a tmpfs of `size` that only this command sees (listed before it
 *  goes): exit 5 saying "No space left", and nothing left in full/. */
test::command_result expect_no_room_and_nothing_left(const temp_dir& dir, const std::string& size,
                                                     const std::string& args) {
  auto r = sh(dir, "mkdir -p full; unshare -m sh -c 'mount -t tmpfs -o size=" + size +
                       " tmpfs full && DCTCHOP " + args + "; echo \"rc=$?\"; ls -A full'");
  const auto rc = r.out.find("rc=");
  EXPECT_EQ(rc == std::string::npos ? std::string("no exit code") : r.out.substr(rc), "rc=5\n")
      << "exit code, or files left in the full folder\n" << args << "\n" << describe(r);
  EXPECT_NE(r.err.find("No space left"), std::string::npos) << describe(r);
  return r;
}

TEST(CrashSafety, AFullFileSystemGivesAnIoErrorAndLeavesNothing) {
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare to mount a small tmpfs";
  temp_dir dir;
  make_input(dir, 256);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  for (const std::string& args : {std::string("compress in.npy -o full/out.dcz"),
                                  std::string("decompress a.dcz -o full/out.npy"),
                                  std::string("decompress a.dcz -o full/out.h5:/x")}) {
    expect_no_room_and_nothing_left(dir, "64k", args);
  }
}

TEST(CrashSafety, ASmallHdf5OutputOnAFullFileSystemFailsAndLeavesNothing) {
  // HDF5 keeps less than 64 KiB of a dataset's data in its sieve buffer and writes it when the
  // dataset closes. A full disk there (where growing the file still succeeds: tmpfs makes it
  // sparse) went unseen: a file with holes for data was renamed into place, with exit 0.
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare to mount a small tmpfs";
  temp_dir dir;
  make_input(dir, 12);  // 48 KiB of data into 32 KiB
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  const auto r = expect_no_room_and_nothing_left(dir, "32k", "decompress a.dcz -o full/out.h5:/x");
  expect_one_line_naming(r, "out.h5");
}

/** In a child process (fork; the mounts are its own): an ext4 file system on a loop device
 *  whose backing file lives on a tmpfs then left without room, so that writing back any new
 *  data to it fails; 96 MiB written to a file there through a write_behind. Exit 0: the
 *  failure was kept; 1: it was not; 2: nothing failed; 3: no setup (mkfs.ext4, loop devices). */
int write_behind_on_a_failing_disk(const std::string& dir) {
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return 3;
  const std::string back = dir + "/back", mnt = dir + "/mnt", img = back + "/img";
  const std::string setup =
      "mkdir -p " + back + " " + mnt + " && mount -t tmpfs -o size=300m tmpfs " + back +
      " && truncate -s 256M " + img + " && mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1"
      ",nodiscard -O ^has_journal " + img + " && mount -o loop,noinit_itable,errors=continue " +
      img + " " + mnt + " && sync && used=$(df -k " + back + " | awk 'NR==2{print $3}') && "
      "mount -o remount,size=${used}k " + back;
  if (std::system(("{ " + setup + "; } >/dev/null 2>&1").c_str()) != 0) return 3;
  int rc = 2;
  const int fd = ::open((mnt + "/f").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    formats::write_behind behind(fd);
    const std::vector<char> mib(std::size_t(1) << 20, 'x');
    std::uint64_t at = 0;
    bool write_failed = false;
    while (at < (std::uint64_t(96) << 20) && behind.failure() == 0 && !write_failed) {
      write_failed = ::write(fd, mib.data(), mib.size()) != static_cast<ssize_t>(mib.size());
      at += mib.size();
      behind.advance(at);
    }
    if (behind.failure() != 0) rc = 0;
    else if (write_failed) rc = 3;  // ext4 itself out of room: not the case under test
    ::close(fd);
  }
  std::system(("umount " + mnt + "; umount " + back + " 2>/dev/null").c_str());  // the loop goes too
  return rc;
}

TEST(CrashSafety, AWriteErrorSeenWhileWritingBehindIsKeptForTheEnd) {
  // The kernel reports a write-back error once to each open file. write_behind's wait saw it
  // and switched itself off, and the fsync that ends an output then returned 0: the output
  // (npy, npz, raw, .dcz or HDF5, where the file system refuses direct I/O) was published with
  // holes, exit 0. failure() keeps the error, and the outputs fail on it (exit 5).
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare to mount file systems";
  temp_dir dir;
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(write_behind_on_a_failing_disk(dir.path().string()));
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "no mkfs.ext4 or loop device here";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "no failure kept: write_behind dropped the error (or the disk took every write)";
}

TEST(CrashSafety, AnOutputIsNamedOnlyAfterItsDataIsOnDiskAndTheNameIsSyncedToo) {
  // The order that survives a power cut: the data synced, then the name made (a link of the
  // unnamed file, or a rename), then the folder synced, so that the name is as durable as
  // the data. strace -y shows which file each fsync is of.
  temp_dir dir;
  make_input(dir, 8);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q && mkdir out").status, 0);
  if (sh(dir, "strace -o /dev/null -f true").status != 0) {
    GTEST_SKIP() << "needs strace, allowed to trace its child";
  }
  const std::string folder = std::filesystem::canonical(dir.file("out")).string();
  for (const std::string& args : {std::string("compress in.npy -o out/b.dcz"),
                                  std::string("decompress a.dcz -o out/b.npy"),
                                  std::string("decompress a.dcz -o out/b.npy -f"),  // a rename
                                  std::string("decompress a.dcz -o out/b.h5:/x")}) {
    // (LeakSanitizer cannot run under ptrace: off for these runs in the ASan build.)
    const auto r = sh(dir, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
                           "strace -o trace.txt -f -y -e trace=fsync,linkat,rename,renameat2 "
                           "DCTCHOP " + args + " -q");
    ASSERT_EQ(r.status, 0) << args << "\n" << describe(r);
    std::vector<std::string> calls;  // the calls in order, without pids and results
    std::istringstream trace(test::read_bytes(dir.file("trace.txt")));
    for (std::string line; std::getline(trace, line);) {
      const auto at = line.find_first_of("fklr", line.find(' ') + 1);  // past the pid
      if (at == std::string::npos) continue;
      for (const char* call : {"fsync(", "linkat(", "rename(", "renameat2("}) {
        if (line.compare(at, std::strlen(call), call) == 0) calls.push_back(line.substr(at));
      }
    }
    const std::string name = args.find("b.dcz") != std::string::npos  ? "out/b.dcz"
                             : args.find("b.h5") != std::string::npos ? "out/b.h5"
                                                                      : "out/b.npy";
    std::size_t named = calls.size(), data_synced = calls.size(), folder_synced = calls.size();
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const std::string& c = calls[i];
      // (strace -f splits a call that another thread's interrupts: "fsync(8</dir> <unfinished
      // ...>", resumed on a later line.)
      const bool on_folder = c.find("<" + folder + ">)") != std::string::npos ||
                             c.find("<" + folder + "> <unfinished") != std::string::npos;
      if (c.rfind("fsync(", 0) == 0 && on_folder) {
        if (folder_synced == calls.size() && named != calls.size()) folder_synced = i;
      } else if (c.rfind("fsync(", 0) == 0 && c.find(folder + "/") != std::string::npos) {
        if (data_synced == calls.size()) data_synced = i;
      } else if (c.find("\"" + name + "\"") != std::string::npos) {
        named = i;
      }
    }
    std::string all;
    for (const auto& c : calls) all += c + "\n";
    EXPECT_LT(data_synced, named) << args << ": the data was not synced before it was named\n" << all;
    EXPECT_LT(named, calls.size()) << args << ": never named\n" << all;
    EXPECT_LT(folder_synced, calls.size()) << args << ": the folder was not synced after the name was made\n" << all;
    if (name != "out/b.npy" || args.find(" -f") != std::string::npos) {
      std::filesystem::remove(dir.file(name));  // (the first .npy stays for -f to replace)
    }
  }
}

TEST(CrashSafety, AnOutputInAFolderItsWriterCannotOpenIsSyncedThroughTheFileOnceNamed) {
  // A write-only drop box (0733) takes files from anyone but cannot be opened by them to be
  // synced: the file, once named (linked, or renamed from a temporary name), is synced again
  // instead (ext4 and XFS commit its new name with it). Run as nobody, which root can trace.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run dctchop as another user";
  temp_dir dir;
  make_input(dir, 8);
  if (sh(dir, "strace -o /dev/null -f true && setpriv --reuid=65534 --regid=65534 "
              "--clear-groups true").status != 0) {
    GTEST_SKIP() << "needs strace and setpriv";
  }
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  ASSERT_EQ(sh(dir, "/usr/bin/python3 -c \"import numpy as np; np.save('y.npy', "
                    "np.arange(8))\" && DCTCHOP compress in.npy -o a.dcz -q && DCTCHOP compress "
                    "in.npy --labels y.npy -o b.dcz -q && chmod 0644 in.npy a.dcz b.dcz && "
                    "mkdir drop && chmod 0733 drop").status, 0);
  struct run {
    std::string args, name;
    bool pair = false;  // data and a labels file: both synced (deferred) after both names
  };
  for (const run& c : {run{"compress in.npy -o drop/out.dcz", "drop/out.dcz"},  // linked
                       run{"compress in.npy -o drop/out.dcz -f", "drop/out.dcz"},  // renamed over
                       run{"decompress a.dcz -o drop/out.h5:/x", "drop/out.h5"},  // renamed
                       run{"decompress b.dcz -o drop/d.npy --labels-out drop/l.npy", "drop/l.npy",
                           true},
                       run{"decompress b.dcz -o drop/d.h5:/x --labels-out drop/l.npy -f",
                           "drop/l.npy", true}}) {
    const auto r = sh(dir, "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" "
                           "strace -o trace.txt -f -e trace=fsync,linkat,rename,renameat2,openat "
                           "setpriv --reuid=65534 --regid=65534 --clear-groups "
                           "DCTCHOP " + c.args + " -q");
    ASSERT_EQ(r.status, 0) << c.args << "\n" << describe(r);
    const std::string trace = read_bytes(dir.file("trace.txt"));
    // The call that made the name: a link or rename to it that did not fail.
    std::size_t named = std::string::npos;
    for (std::size_t at = 0, end = 0; at < trace.size(); at = end + 1) {
      end = trace.find('\n', at);
      if (end == std::string::npos) end = trace.size();
      const std::string line = trace.substr(at, end - at);
      if (line.find(", \"" + c.name + "\"") != std::string::npos &&
          line.find("open") == std::string::npos && line.find("= -1") == std::string::npos) {
        named = end;
        break;
      }
    }
    ASSERT_NE(named, std::string::npos) << c.args << ": never named\n" << trace;
    const auto refused = trace.find("\"drop\", O_RDONLY", named);
    ASSERT_NE(refused, std::string::npos) << c.args << ": the folder was opened after all\n" << trace;
    EXPECT_NE(trace.find("EACCES", refused), std::string::npos) << c.args << "\n" << trace;
    EXPECT_NE(trace.find("fsync(", refused), std::string::npos)
        << c.args << ": the file was not synced again once named\n" << trace;
    if (c.pair) {  // the data's folder refused too, and the data synced again after that
      const auto again = trace.find("\"drop\", O_RDONLY", refused + 1);
      ASSERT_NE(again, std::string::npos) << c.args << ": one folder sync tried\n" << trace;
      EXPECT_NE(trace.find("fsync(", trace.find("fsync(", refused) + 1), std::string::npos)
          << c.args << ": one of the two files not synced again\n" << trace;
    }
  }
}

TEST(CrashSafety, AWithdrawnOutputIsGoneForGoodAndADeviceFlushFailureIsTheOutputs) {
  temp_dir dir;
  test::make_index_archive(dir, 6, 2, true);  // a.dcz, with labels
  ASSERT_EQ(sh(dir, "mkdir out").status, 0);
  if (sh(dir, "strace -o /dev/null -f true").status != 0) {
    GTEST_SKIP() << "needs strace, allowed to trace its child";
  }
  // The labels' link fails (as if a file had appeared at its name): the data, named and its
  // folder synced just before, is removed, and that removal is synced as well, so that a
  // power cut cannot bring the data back without its labels.
  const std::string folder = std::filesystem::canonical(dir.file("out")).string();
  const std::string asan = "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\" ";
  auto r = sh(dir, asan + "strace -o trace.txt -f -y -e trace=fsync,unlink,unlinkat,linkat "
                          "-e inject=linkat:error=EEXIST:when=2 "
                          "DCTCHOP decompress a.dcz -o out/d.npy --labels-out out/l.npy -q");
  EXPECT_EQ(r.status, 6) << describe(r);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "out", "trace.txt", "x.npy", "y.npy"}));
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("out")));
  const std::string trace = test::read_bytes(dir.file("trace.txt"));
  const auto removed = trace.find("\"out/d.npy\"", trace.find("unlink"));
  ASSERT_NE(removed, std::string::npos) << trace;
  EXPECT_NE(trace.find("fsync(", removed), std::string::npos) << "no sync after the removal\n" << trace;
  EXPECT_NE(trace.find("<" + folder + ">)", removed), std::string::npos)
      << "the folder was not synced after the removal\n" << trace;
  // A device written in place (here /dev/null, whose fsync the tracer fails) is flushed at
  // the end like a file, and a failure there is the output's: exit 5 naming it.
  r = sh(dir, asan + "strace -o /dev/null -f -e trace=fsync -e inject=fsync:error=EIO "
                     "DCTCHOP decompress a.dcz -o /dev/null -q");
  EXPECT_EQ(r.status, 5) << describe(r);
  EXPECT_NE(r.err.find("/dev/null: cannot flush: Input/output error"), std::string::npos) << r.err;
}

TEST(CrashSafety, ADiskThatFailsEveryWriteGivesAnIoErrorAndLeavesNothing) {
  // A real file system on a failing disk, end to end: ext4 on a loop device whose backing
  // file has no room left, so that every write of new data fails in the device (what a disk
  // going bad looks like to dctchop, where a full tmpfs fails at once in write()). Each output
  // kind exits 5 naming it, and nothing is left on that file system.
  if (!can_mount()) GTEST_SKIP() << "needs root and unshare to mount file systems";
  temp_dir dir;
  make_input(dir, 2048);  // 8 MiB of data
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q && mkdir back mnt").status, 0);
  // (a script file: the awk program's quotes would end a sh -c '...')
  test::write_bytes(dir.file("failing_disk.sh"),
                    "{ mount -t tmpfs -o size=300m tmpfs back && truncate -s 256M back/img &&\n"
                    "  mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "
                    "-O ^has_journal back/img &&\n"
                    "  mount -o loop,noinit_itable,errors=continue back/img mnt && sync &&\n"
                    "  used=$(df -k back | awk 'NR==2{print $3}') &&\n"
                    "  mount -o remount,size=${used}k back; } >/dev/null 2>&1 || exit 77\n"
                    "\"$@\" -q; echo \"rc=$?\"; ls -A mnt; umount mnt; umount back\n");
  const std::pair<std::string, std::string> runs[] = {
      {"compress in.npy -o mnt/out.dcz", "mnt/out.dcz"},
      {"decompress a.dcz -o mnt/out.npy", "mnt/out.npy"},
      {"decompress a.dcz -o mnt/out.h5:/x", "mnt/out.h5"},
      {"decompress a.dcz -o mnt/out.raw --raw", "mnt/out.raw"}};
  for (const auto& [args, output] : runs) {
    auto r = sh(dir, "unshare -m sh failing_disk.sh DCTCHOP " + args);
    if (r.status == 77) GTEST_SKIP() << "no mkfs.ext4 or loop device here\n" << describe(r);
    EXPECT_EQ(r.out, "rc=5\nlost+found\n") << args << "\n" << describe(r);
    expect_one_line_naming(r, output);
  }
}

TEST(CrashSafety, AReadOnlyFolderGivesAnIoErrorNamingTheOutput) {
  temp_dir dir;
  make_input(dir, 16);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q && mkdir ro").status, 0);
  // Root ignores permissions: a read-only bind mount then. Others: a folder without write
  // permission.
  const bool use_mount = can_mount();
  if (::geteuid() == 0 && !use_mount) {
    GTEST_SKIP() << "root without the right to mount: no folder is read-only to it";
  }
  for (const std::string& args : {std::string("compress in.npy -o ro/out.dcz"),
                                  std::string("decompress a.dcz -o ro/out.npy"),
                                  std::string("decompress a.dcz -o ro/out.h5:/x")}) {
    const std::string cmd =
        use_mount ? "unshare -m sh -c 'mount --bind ro ro && mount -o remount,bind,ro ro && "
                    "DCTCHOP " + args + "; echo \"rc=$?\"; ls -A ro'"
                  : "chmod 555 ro; DCTCHOP " + args + "; echo \"rc=$?\"; ls -A ro";
    const auto r = sh(dir, cmd);
    EXPECT_EQ(r.out, "rc=5\n") << args << "\n" << describe(r);
    expect_one_line_naming(r, "ro/out.");
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.dcz", "in.npy", "ro"}));
}

TEST(CrashSafety, StdoutOnAFullDeviceGivesAnIoError) {
  temp_dir dir;
  make_input(dir, 64);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q").status, 0);
  // Reports too, and what CLI11 prints itself (it flushes: the reason was lost by the end).
  for (const std::string& args :
       {std::string("compress in.npy -o -"), std::string("decompress a.dcz -o -"),
        std::string("info a.dcz --json"), std::string("--version"), std::string("--help")}) {
    const auto r = sh(dir, "DCTCHOP " + args + " > /dev/full");
    EXPECT_EQ(r.status, 5) << args << "\n" << describe(r);
    EXPECT_NE(r.err.find("No space left"), std::string::npos) << describe(r);
  }
}

TEST(CrashSafety, AKeptOriginalIsAHiddenOldLinkThatGoesBackOrGoes) {
  // decompress -f --labels-out keeps the data's old file until the labels are named. Its
  // name must not look like a temporary file's (".NAME.tmp..."): after a SIGKILL in that
  // instant it is the only copy of the old data.
  temp_dir dir;
  const std::string path = dir.file("out.npy");
  auto replace_with = [&](const std::string& text) {
    test::write_bytes(dir.file("new"), text);
    std::filesystem::rename(dir.file("new"), path);
  };
  test::write_bytes(path, "old data");
  {
    formats::kept_original kept(path);
    const auto names = dir.entries();
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(names[0].rfind(".out.npy.old", 0), 0u) << names[0];
    EXPECT_EQ(names[0].size(), std::string(".out.npy.old").size() + 12) << names[0];
    EXPECT_EQ(read_bytes(dir.file(names[0])), "old data");
    replace_with("new data");
    EXPECT_TRUE(kept.restore());
    EXPECT_FALSE(kept.restore()) << "put back once";
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.npy"});
  EXPECT_EQ(read_bytes(path), "old data");
  {
    formats::kept_original kept(path);
    replace_with("new data");
  }  // not put back: the kept name goes, the new file stays
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.npy"});
  EXPECT_EQ(read_bytes(path), "new data");
}

TEST(CrashSafety, TheInputAsOutputIsRefusedByNameByLinkAndBySymlink) {
  temp_dir dir;
  make_input(dir, 16);
  ASSERT_EQ(sh(dir, "DCTCHOP compress in.npy -o a.dcz -q && ln in.npy hard.npy && "
                    "ln -s in.npy soft.npy && ln -s a.dcz soft.dcz").status, 0);
  const std::string npy = read_bytes(dir.file("in.npy")), dcz = read_bytes(dir.file("a.dcz"));
  for (const auto& [args, says] :
       {std::pair{"compress in.npy -o in.npy -f", "in.npy: the output would replace the input"},
        std::pair{"compress in.npy -o hard.npy -f", "hard.npy: is the same file as the input in.npy"},
        std::pair{"compress in.npy -o soft.npy -f", "soft.npy: is the same file as the input in.npy"},
        std::pair{"compress - -o in.npy -f < in.npy",
                  "in.npy: is the same file as standard input, the input"},
        std::pair{"decompress a.dcz -o a.dcz -f", "a.dcz: the output would replace the input"},
        std::pair{"decompress a.dcz -o soft.dcz -f", "soft.dcz: is the same file as the input a.dcz"},
        std::pair{"decompress soft.dcz -o a.dcz -f", "a.dcz: is the same file as the input soft.dcz"}}) {
    const auto r = sh(dir, std::string("DCTCHOP ") + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
    EXPECT_NE(r.err.find(says), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_EQ(read_bytes(dir.file("in.npy")), npy);
  EXPECT_EQ(read_bytes(dir.file("a.dcz")), dcz);
}

}  // namespace
}  // namespace dctchop
