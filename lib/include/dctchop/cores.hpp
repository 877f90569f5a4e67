/** @file cores.hpp
 *  The CPUs this process may use, for the default thread counts ("--threads 0: every core").
 *  A container or a batch job limits a process in two ways: the CPUs it may run on (its
 *  affinity: taskset, a cpuset cgroup, Slurm's binding), which OpenMP sees, and a share of
 *  CPU time (a cgroup CPU quota: `docker --cpus`, a Kubernetes CPU limit), which it does not.
 *  A process given 4 CPUs' time on a 128-core node that starts 128 threads spends each
 *  period's quota in a fraction of the period and then waits, all its threads stopped, for
 *  the next: slower than 4 threads, and worse for a pipeline whose reader waits too.
 */
#pragma once

#include <optional>
#include <string>

namespace dctchop {

/** What limits the CPUs of a process, and the threads its work should take. */
struct core_limits {
  unsigned online = 1;    ///< CPUs of the machine (std::thread::hardware_concurrency)
  unsigned affinity = 1;  ///< CPUs the process may run on (sched_getaffinity)
  /** CPUs' worth of time that the tightest cgroup CPU quota on the process's cgroup path
   *  grants (quota / period: 2.5 for 250 ms each 100 ms), where one is set and readable. */
  std::optional<double> quota;
  /** The file that sets that quota, such as /sys/fs/cgroup/cpu.max (v2) or
   *  /sys/fs/cgroup/cpu/cpu.cfs_quota_us (v1); empty where there is none. */
  std::string quota_from;
  /** The first number of OMP_NUM_THREADS, where that is set to one: the threads the user
   *  gives every OpenMP program (a batch job's share of its node, say). */
  std::optional<unsigned> omp_num_threads;
  /** Threads for "every core": the affinity's CPUs, no more than the quota rounded up and
   *  than OMP_NUM_THREADS, at least 1. */
  unsigned usable = 1;
};

/** This process's limits, read from the system now (sched_getaffinity, OMP_NUM_THREADS,
 *  /proc/self/cgroup,
 *  /proc/self/mountinfo and the cgroup files: cgroup v2's cpu.max, v1's cpu.cfs_quota_us and
 *  cpu.cfs_period_us, on the process's cgroup and each cgroup above it that is mounted).
 *  Anything unreadable or malformed is taken as no quota: this never throws. About 60 us
 *  here: callers read it once per backend or command, not per sample. */
core_limits usable_cores() noexcept;

/** usable_cores() with /proc and the cgroup mounts read below `root` (a folder that stands
 *  for "/", as a test builds one), the affinity given, and `omp_num_threads` as the value of
 *  OMP_NUM_THREADS (null: not set). */
core_limits usable_cores_under(const std::string& root, unsigned online, unsigned affinity,
                               const char* omp_num_threads = nullptr) noexcept;

/** Ends the OpenMP threads that the calling thread's parallel regions keep for the next one
 *  (omp_pause_resource_all; no effect inside a region or without OpenMP), to be called before
 *  fork(): GNU libgomp keeps such a pool for each thread that ran a region, and a child
 *  forked from that thread inherits the pool without its threads, so that OpenMP work of
 *  several threads in the child (PyTorch's, on the same libgomp) waits for them forever. The
 *  next region of this thread starts its threads anew. The Python module calls it from a
 *  pthread_atfork handler. */
void release_thread_pool() noexcept;

}  // namespace dctchop
