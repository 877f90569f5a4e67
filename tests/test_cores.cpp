// The cores that "--threads 0" takes: the affinity, and no more than a cgroup CPU quota, read
// from trees of /proc and cgroup files made as the kernel writes them (cgroup v1 and v2,
// containers with and without a cgroup namespace, Kubernetes' nesting, hybrid mounts).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "dctchop/codec.hpp"
#include "dctchop/cores.hpp"
#include "omp.hpp"
#include "test_util.hpp"

namespace dctchop {
namespace {

using test::temp_dir;
namespace fs = std::filesystem;

void put(const temp_dir& root, const std::string& path, const std::string& text) {
  const fs::path p = root.path() / path.substr(1);
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// mountinfo lines as a systemd host (v2 only) and this test machine (v1 with v2 beside) show.
const std::string v2_mount =
    "30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";
const std::string v1_mounts =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "33 30 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

// A v1 cgroup folder's quota files (quota -1: none), the period 100 ms.
void put_v1(const temp_dir& root, const std::string& dir, const std::string& quota) {
  put(root, dir + "/cpu.cfs_quota_us", quota + "\n");
  put(root, dir + "/cpu.cfs_period_us", "100000\n");
}

// The /proc files of a process in cgroup `path` of the v2 hierarchy mounted as systemd does.
void put_v2_process(const temp_dir& root, const std::string& path) {
  put(root, "/proc/self/cgroup", "0::" + path + "\n");
  put(root, "/proc/self/mountinfo", v2_mount);
}

core_limits read(const temp_dir& root, unsigned affinity = 16) {
  return usable_cores_under(root.path().string(), 32, affinity);
}

TEST(Cores, AV2QuotaInTheContainersOwnCgroupCapsTheThreadsRoundedUp) {
  temp_dir root;  // a container with its own cgroup namespace: its cgroup is "/"
  put_v2_process(root, "/");
  put(root, "/sys/fs/cgroup/cpu.max", "250000 100000\n");
  const core_limits c = read(root);
  ASSERT_TRUE(c.quota.has_value());
  EXPECT_DOUBLE_EQ(*c.quota, 2.5);
  EXPECT_EQ(c.quota_from, "/sys/fs/cgroup/cpu.max");
  EXPECT_EQ(c.usable, 3U);
  EXPECT_EQ(c.affinity, 16U);
  EXPECT_EQ(c.online, 32U);
}

TEST(Cores, NoQuotaMaxOrNoFilesLeaveTheAffinity) {
  temp_dir root;
  put_v2_process(root, "/user.slice/session-1.scope");
  put(root, "/sys/fs/cgroup/user.slice/session-1.scope/cpu.max", "max 100000\n");
  core_limits c = read(root, 7);
  EXPECT_FALSE(c.quota.has_value());
  EXPECT_TRUE(c.quota_from.empty());
  EXPECT_EQ(c.usable, 7U);

  temp_dir bare;  // no /proc at all (not Linux, or a sandbox)
  c = read(bare, 5);
  EXPECT_FALSE(c.quota.has_value());
  EXPECT_EQ(c.usable, 5U);
}

TEST(Cores, TheTightestQuotaOnTheWayUpHoldsAsKubernetesNestsThem) {
  temp_dir root;  // a host's view of a pod's container: a limit on the pod, none on the container
  const std::string pod = "/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice";
  put_v2_process(root, "/kubepods.slice/kubepods-pod1.slice/cri-abc.scope");
  put(root, "/sys/fs/cgroup/kubepods.slice/cpu.max", "max 100000\n");
  put(root, pod + "/cpu.max", "400000 100000\n");
  put(root, pod + "/cri-abc.scope/cpu.max", "max 100000\n");
  core_limits c = read(root);
  ASSERT_TRUE(c.quota.has_value());
  EXPECT_DOUBLE_EQ(*c.quota, 4.0);
  EXPECT_EQ(c.quota_from, pod + "/cpu.max");
  EXPECT_EQ(c.usable, 4U);

  put(root, pod + "/cri-abc.scope/cpu.max", "150000 100000\n");  // tighter below: it holds
  c = read(root);
  EXPECT_DOUBLE_EQ(c.quota.value_or(0), 1.5);
  EXPECT_EQ(c.quota_from, pod + "/cri-abc.scope/cpu.max");
  EXPECT_EQ(c.usable, 2U);
}

TEST(Cores, AnAffinityNarrowerThanTheQuotaHoldsAndAQuotaUnderOneCpuLeavesOneThread) {
  temp_dir root;
  put_v2_process(root, "/");
  put(root, "/sys/fs/cgroup/cpu.max", "800000 100000\n");
  EXPECT_EQ(read(root, 3).usable, 3U);  // taskset -c 0-2 in a container of 8 CPUs' time
  put(root, "/sys/fs/cgroup/cpu.max", "20000 100000\n");
  const core_limits c = read(root, 3);
  EXPECT_DOUBLE_EQ(c.quota.value_or(0), 0.2);
  EXPECT_EQ(c.usable, 1U);
}

TEST(Cores, V1QuotasAreReadWhereTheCpuControllerIsMountedEvenBesideV2) {
  temp_dir root;  // a hybrid host: the cpu controller in v1, an empty v2 hierarchy beside it
  put(root, "/proc/self/cgroup",
      "12:cpuset:/job7\n4:cpu,cpuacct:/job7/step0\n1:name=systemd:/job7\n0::/job7\n");
  put(root, "/proc/self/mountinfo", v1_mounts);
  put(root, "/sys/fs/cgroup/unified/job7/cpu.max", "100000 100000\n");  // not the controller's
  put_v1(root, "/sys/fs/cgroup/cpu,cpuacct/job7", "600000");
  put_v1(root, "/sys/fs/cgroup/cpu,cpuacct/job7/step0", "-1");
  put_v1(root, "/sys/fs/cgroup/cpu,cpuacct", "-1");
  const core_limits c = read(root);
  EXPECT_DOUBLE_EQ(c.quota.value_or(0), 6.0);
  EXPECT_EQ(c.quota_from, "/sys/fs/cgroup/cpu,cpuacct/job7/cpu.cfs_quota_us");
  EXPECT_EQ(c.usable, 6U);
}

TEST(Cores, AContainerWithoutACgroupNamespaceReadsItsCgroupAtTheMountPoint) {
  temp_dir root;  // docker --cpus=3 on v1 without cgroupns: the container's folder is mounted
  put(root, "/proc/self/cgroup", "5:cpu,cpuacct:/docker/abc\n");
  put(root, "/proc/self/mountinfo",
      "31 30 0:28 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup "
      "rw,cpu,cpuacct\n");
  put_v1(root, "/sys/fs/cgroup/cpu,cpuacct", "300000");
  const core_limits c = read(root);
  EXPECT_DOUBLE_EQ(c.quota.value_or(0), 3.0);
  EXPECT_EQ(c.quota_from, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us");
  EXPECT_EQ(c.usable, 3U);
}

TEST(Cores, ACgroupOutsideTheMountedFolderHasNoQuotaHere) {
  temp_dir root;  // "/docker/abcd" is not under the mounted "/docker/abc"
  put(root, "/proc/self/cgroup", "5:cpu:/docker/abcd\n");
  put(root, "/proc/self/mountinfo",
      "31 30 0:28 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n");
  put_v1(root, "/sys/fs/cgroup/cpu", "100000");
  const core_limits c = read(root, 9);
  EXPECT_FALSE(c.quota.has_value());
  EXPECT_EQ(c.usable, 9U);
}

TEST(Cores, ACgroupOutsideItsNamespacesRootHasNoQuotaHere) {
  for (const char* path : {"/../sibling", "/..", "/a/../b", "/./a"}) {
    SCOPED_TRACE(path);
    temp_dir root;  // "/.." would lead the walk out of the mount, up to /sys/fs
    put_v2_process(root, path);
    put(root, "/sys/fs/cgroup/cpu.max", "100000 100000\n");  // the namespace's root: no ancestor
    put(root, "/sys/fs/cpu.max", "100000 100000\n");
    put(root, "/sys/fs/sibling/cpu.max", "100000 100000\n");
    put(root, "/sys/fs/cgroup/b/cpu.max", "100000 100000\n");
    const core_limits c = read(root, 6);
    EXPECT_FALSE(c.quota.has_value()) << c.quota_from;
    EXPECT_EQ(c.usable, 6U);
  }
}

TEST(Cores, EscapedMountPointsAreUnescaped) {
  temp_dir root;  // a space in the mount point, written \040 in mountinfo
  put(root, "/proc/self/cgroup", "0::/a\n");
  put(root, "/proc/self/mountinfo",
      "30 22 0:27 / /mnt/my\\040cgroups rw shared:4 master:1 - cgroup2 none rw\n");
  put(root, "/mnt/my cgroups/a/cpu.max", "200000 50000\n");
  const core_limits c = read(root);
  EXPECT_DOUBLE_EQ(c.quota.value_or(0), 4.0);
  EXPECT_EQ(c.quota_from, "/mnt/my cgroups/a/cpu.max");
}

TEST(Cores, MalformedFilesAreNoQuotaAndNoError) {
  for (const char* text : {"", "max", "100000", "abc 100000", "100000 0", "0 100000",
                           "-5 100000", "100000 100000 7", "1e5 100000"}) {
    SCOPED_TRACE(text);
    temp_dir root;
    put_v2_process(root, "/");
    put(root, "/sys/fs/cgroup/cpu.max", text);
    const core_limits c = read(root, 4);
    EXPECT_FALSE(c.quota.has_value());
    EXPECT_EQ(c.usable, 4U);
  }
  temp_dir root;  // lines the parsers must step over
  put(root, "/proc/self/cgroup", "garbage\n3:cpu:relative\n0::/\n");
  put(root, "/proc/self/mountinfo", "short line\n1 2 3 4 5 6 7 no-dash\n" + v2_mount);
  put(root, "/sys/fs/cgroup/cpu.max", "100000 100000\n");
  EXPECT_EQ(read(root).usable, 1U);
}

TEST(Cores, OmpNumThreadsFirstNumberCapsTheThreadsAndAnInvalidOneIsIgnored) {
  temp_dir root;
  put_v2_process(root, "/");
  const std::string at = root.path().string();
  for (const auto& [text, want] : std::vector<std::pair<const char*, unsigned>>{
           {"4", 4}, {"4,2", 4}, {" 3 ", 3}, {"1", 1}, {"64", 16}}) {
    SCOPED_TRACE(text);
    const core_limits c = usable_cores_under(at, 32, 16, text);
    EXPECT_EQ(c.usable, want);
    ASSERT_TRUE(c.omp_num_threads.has_value());
  }
  for (const char* text : {"", "0", "-2", "x", "4x", ",4", "2.5"}) {
    SCOPED_TRACE(text);
    const core_limits c = usable_cores_under(at, 32, 16, text);
    EXPECT_FALSE(c.omp_num_threads.has_value());
    EXPECT_EQ(c.usable, 16U);
  }
  EXPECT_EQ(usable_cores_under(at, 32, 16, nullptr).usable, 16U);
  put(root, "/sys/fs/cgroup/cpu.max", "250000 100000\n");  // the tighter of the two holds
  EXPECT_EQ(usable_cores_under(at, 32, 16, "2").usable, 2U);
  EXPECT_EQ(usable_cores_under(at, 32, 16, "8").usable, 3U);
}

TEST(Cores, ThisProcessCountsItsAffinityMaskAndTakesItWhereNoQuotaIsSet) {
  const std::size_t cpus = 1 << 16;  // (more than cpu_set_t's 1024, for the largest machines)
  cpu_set_t* allowed = CPU_ALLOC(cpus);
  ASSERT_NE(allowed, nullptr);
  const std::size_t size = CPU_ALLOC_SIZE(cpus);
  CPU_ZERO_S(size, allowed);
  ASSERT_EQ(::sched_getaffinity(0, size, allowed), 0);
  const int count = CPU_COUNT_S(size, allowed);
  CPU_FREE(allowed);
  const core_limits c = usable_cores();
  EXPECT_EQ(c.affinity, static_cast<unsigned>(count));
  EXPECT_GE(c.usable, 1U);
  EXPECT_LE(c.usable, c.affinity);
  if (!c.quota) {
    EXPECT_EQ(c.usable, c.affinity);
  }
  // What a CPU backend takes for "every core" (one thread without OpenMP).
#if defined(_OPENMP)
  EXPECT_EQ(make_backend(backend_kind::cpu, {0})->threads(), static_cast<int>(c.usable));
#else
  EXPECT_EQ(make_backend(backend_kind::cpu, {0})->threads(), 1);
#endif
}

}  // namespace
}  // namespace dctchop

namespace {

/** In a forked child with an address-space limit of `headroom` bytes above what it maps now:
 *  threads_that_start(want), or -1 where the child did not report. */
int threads_started_with_headroom(int want, std::uint64_t headroom) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    long pages = 0;
    std::ifstream statm("/proc/self/statm");
    statm >> pages;
    const rlim_t now = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
    const rlimit lim{now + headroom, now + headroom};
    int got = -1;
    if (::setrlimit(RLIMIT_AS, &lim) == 0) got = dctchop::detail::threads_that_start(want);
    (void)!::write(fds[1], &got, sizeof got);
    ::_exit(0);
  }
  ::close(fds[1]);
  int got = -1;
  if (pid < 0 || ::read(fds[0], &got, sizeof got) != sizeof got) got = -1;
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return got;
}

}  // namespace

TEST(Cores, AnOpenMpTeamIsNoLargerThanTheThreadsTheSystemStartsNow) {
  // libgomp ends the process (exit 1, "Thread creation failed", no cleanup: an HDF5 output's
  // temporary file left behind) when a team's thread does not start: under ulimit -v, a pids
  // cgroup, RLIMIT_NPROC. region_threads starts the threads a larger team needs first
  // (threads_that_start) and asks for no more than started. A thread's stack is 8 MiB by
  // default (RLIMIT_STACK): with room for a few, 8 do not all start; with room, they do.
#if defined(DCTCHOP_TEST_ASAN)
  GTEST_SKIP() << "AddressSanitizer maps terabytes of shadow memory: no address-space limit";
#endif
  EXPECT_EQ(dctchop::detail::threads_that_start(8), 8);
  EXPECT_EQ(dctchop::detail::threads_that_start(0), 0);
  rlimit stack{};
  ASSERT_EQ(::getrlimit(RLIMIT_STACK, &stack), 0);
  if (stack.rlim_cur == RLIM_INFINITY || stack.rlim_cur < (std::uint64_t(4) << 20)) {
    GTEST_SKIP() << "thread stacks are not of RLIMIT_STACK's size here";
  }
  const int tight = threads_started_with_headroom(8, 3 * stack.rlim_cur);
  EXPECT_GE(tight, 0) << "the child did not report";
  EXPECT_LT(tight, 8) << "8 thread stacks fit in the room of 3";
  EXPECT_EQ(threads_started_with_headroom(8, 16 * stack.rlim_cur + (std::uint64_t(64) << 20)), 8);
}
