/* SPDX-License-Identifier: Apache-2.0 */
/* The memory kvtierd may use (see daemon_memory.h). */
#include "app/daemon_memory.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Limits at or above this mean none (v1 writes 2^63 rounded to a page). */
#define NO_LIMIT (1ull << 62)

static uint64_t host_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (!kb)
		return (uint64_t)sysconf(_SC_AVPHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	return kb * 1024;
}

/* The number in dir/name; UINT64_MAX for "max", a missing file or junk. */
static uint64_t read_value(const char *dir, const char *name)
{
	char path[700], text[64] = "";
	unsigned long long v;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return UINT64_MAX;
	if (!fgets(text, sizeof(text), f))
		text[0] = 0;
	fclose(f);
	if (sscanf(text, "%llu", &v) != 1 || v >= NO_LIMIT)
		return UINT64_MAX;
	return v;
}

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether dir is the root of a cgroup v2 file system. */
static bool v2_root(const char *dir)
{
	char path[400];

	snprintf(path, sizeof(path), "%s/cgroup.controllers", dir);
	return access(path, F_OK) == 0;
}

static void start(struct kvtd_memory *m)
{
	memset(m, 0, sizeof(*m));
	m->host_available = host_available();
	m->cgroup_limit = m->cgroup_room = UINT64_MAX;
}

static void finish(struct kvtd_memory *m)
{
	m->available = m->host_available < m->cgroup_room ? m->host_available : m->cgroup_room;
}

/* Fold one cgroup directory's limit and usage into m. */
static void take_limit(struct kvtd_memory *m, const char *dir, bool v2)
{
	uint64_t limit = read_value(dir, v2 ? "memory.max" : "memory.limit_in_bytes");
	uint64_t used = read_value(dir, v2 ? "memory.current" : "memory.usage_in_bytes");
	uint64_t room;

	if (limit == UINT64_MAX)
		return;
	if (used == UINT64_MAX)
		used = 0;
	room = used < limit ? limit - used : 0;
	if (limit < m->cgroup_limit) {
		m->cgroup_limit = limit;
		snprintf(m->cgroup_dir, sizeof(m->cgroup_dir), "%s", dir);
	}
	if (room < m->cgroup_room)
		m->cgroup_room = room;
}

/* Every cgroup from mount/path up to mount itself. A path that is not under
 * the mount (a cgroup namespace shows "/") leaves only the mount's root. */
static void take_hierarchy(struct kvtd_memory *m, const char *mount, const char *path, bool v2)
{
	char dir[512];
	size_t root_len = strlen(mount);

	if (snprintf(dir, sizeof(dir), "%s%s", mount, path) >= (int)sizeof(dir) || !is_dir(dir))
		snprintf(dir, sizeof(dir), "%s", mount);
	for (;;) {
		char *slash;

		take_limit(m, dir, v2);
		if (strlen(dir) <= root_len)
			break;
		slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < root_len)
			break;
		*slash = 0;
	}
}

void kvtd_memory_measure_at(struct kvtd_memory *m, const char *proc_cgroup, const char *fs_root)
{
	const char *line = proc_cgroup;

	start(m);
	/* lines "ID:CONTROLLERS:PATH"; v2 is "0::PATH" */
	while (line && *line) {
		const char *end = strchr(line, '\n'), *c1 = strchr(line, ':'), *c2;
		char controllers[256], path[256], mount[300];
		size_t n;

		if (!end)
			end = line + strlen(line);
		c2 = c1 && c1 < end ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
		if (c2 && (size_t)(c2 - c1 - 1) < sizeof(controllers) &&
		    (size_t)(end - c2 - 1) < sizeof(path)) {
			n = (size_t)(c2 - c1 - 1);
			memcpy(controllers, c1 + 1, n);
			controllers[n] = 0;
			n = (size_t)(end - c2 - 1);
			memcpy(path, c2 + 1, n);
			path[n] = 0;
			if (!strcmp(path, "/"))
				path[0] = 0;
			if (!controllers[0]) {
				/* v2 alone at the root, or beside v1 under unified/ */
				snprintf(mount, sizeof(mount), v2_root(fs_root) ? "%s" : "%s/unified",
					 fs_root);
				take_hierarchy(m, mount, path, true);
			} else {
				char *save, *tok;

				for (tok = strtok_r(controllers, ",", &save); tok;
				     tok = strtok_r(NULL, ",", &save)) {
					if (strcmp(tok, "memory"))
						continue;
					snprintf(mount, sizeof(mount), "%s/memory", fs_root);
					take_hierarchy(m, mount, path, false);
				}
			}
		}
		line = *end ? end + 1 : end;
	}
	finish(m);
}

void kvtd_memory_measure(struct kvtd_memory *m)
{
	const char *dir = getenv("KVTIER_CGROUP_DIR");
	char text[4096] = "";
	size_t n = 0;
	FILE *f;

	if (dir && *dir) {
		start(m);
		/* whichever version's files the directory has */
		take_limit(m, dir, true);
		take_limit(m, dir, false);
		finish(m);
		return;
	}
	f = fopen("/proc/self/cgroup", "r");
	if (f) {
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
	}
	text[n] = 0;
	kvtd_memory_measure_at(m, text, "/sys/fs/cgroup");
}
