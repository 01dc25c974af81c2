/* SPDX-License-Identifier: Apache-2.0 */
/* How much memory kvtierd may use: the host's available memory, and the room
 * left under the memory limit of its cgroup (v2 memory.max, or v1
 * memory.limit_in_bytes), the tighter of the two. The DRAM tier is sized
 * from it, and a --dram that does not fit is refused. */
#ifndef KVT_APP_DAEMON_MEMORY_H
#define KVT_APP_DAEMON_MEMORY_H

#include <stdint.h>

struct kvtd_memory {
	uint64_t host_available;  /* MemAvailable of /proc/meminfo */
	uint64_t cgroup_limit;    /* tightest limit from the cgroup up; UINT64_MAX: none */
	uint64_t cgroup_room;     /* what the cgroups may still take; UINT64_MAX: no limit */
	uint64_t available;       /* min(host_available, cgroup_room) */
	char cgroup_dir[512];     /* where the limit was read ("" without one) */
};

/* Measure it. The cgroup is the process's own, found through
 * /proc/self/cgroup under /sys/fs/cgroup, or the directory named by
 * $KVTIER_CGROUP_DIR (for containers that mount it elsewhere, and for
 * tests); each limit from it up to the mount's root counts. */
void kvtd_memory_measure(struct kvtd_memory *m);

/* The same with the places to look given: `proc_cgroup` is the text of a
 * /proc/PID/cgroup file, `fs_root` the folder where cgroup file systems are
 * mounted ("/sys/fs/cgroup"). For tests of the discovery. */
void kvtd_memory_measure_at(struct kvtd_memory *m, const char *proc_cgroup, const char *fs_root);

#endif /* KVT_APP_DAEMON_MEMORY_H */
