/* SPDX-License-Identifier: Apache-2.0 */
/* The families every Prometheus exporter is expected to have: which build
 * runs (kvtier_build_info) and the process's own figures under the names
 * the client libraries use (process_resident_memory_bytes, ...), so the
 * usual dashboards and alerts work on kvtierd as on any other target. Read
 * from /proc at each scrape. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/version.h"
#include "transport/prom_text.h"
#include "transport/proto.h"
#include "transport/server_int.h"

/* Seconds since the epoch when the system booted: now less the time since
 * boot, both read now (btime of /proc/stat drifts from the wall clock when
 * a machine was suspended or its clock stepped). */
static double boot_time(void)
{
	struct timespec real, boot;

	clock_gettime(CLOCK_REALTIME, &real);
	clock_gettime(CLOCK_BOOTTIME, &boot);
	return (double)(real.tv_sec - boot.tv_sec) + (double)(real.tv_nsec - boot.tv_nsec) / 1e9;
}

/* Field 22 of /proc/self/stat, the start time in clock ticks since boot;
 * 0 when it cannot be read. The command name (field 2) may hold spaces,
 * so fields are counted from its closing parenthesis. */
static unsigned long long start_ticks(void)
{
	char buf[1024], *p;
	unsigned long long v = 0;
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = 0;
	if (!(p = strrchr(buf, ')')))
		return 0;
	/* p ends field 2; each step finds the space before the next field */
	for (int field = 3; field <= 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

static unsigned long long open_fds(void)
{
	unsigned long long n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n ? n - 1 : 0; /* not the one opendir holds */
}

void kvt_process_prom(struct kvt_textbuf *b)
{
	unsigned long long pages_virt = 0, pages_res = 0;
	long page = sysconf(_SC_PAGESIZE), hz = sysconf(_SC_CLK_TCK);
	struct rlimit rl = { 0 };
	struct rusage ru = { 0 };
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f || fscanf(f, "%llu %llu", &pages_virt, &pages_res) != 2)
		pages_virt = pages_res = 0;
	if (f)
		fclose(f);
	getrlimit(RLIMIT_NOFILE, &rl);
	getrusage(RUSAGE_SELF, &ru);

	kvt_prom_help(b, "kvtier_build_info", "gauge",
		      "Always 1; the labels say which kvtier runs.");
	kvt_textbuf_printf(b, "kvtier_build_info{version=\"%s\",protocol_max=\"%d\"} 1\n",
			   kvt_version(), KVT_PROTO_VERSION_MAX);
	kvt_prom_count(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
		       pages_res * (unsigned long long)page);
	kvt_prom_count(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
		       pages_virt * (unsigned long long)page);
	kvt_prom_count(b, "process_open_fds", "gauge", "Number of open file descriptors.",
		       open_fds());
	kvt_prom_count(b, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
		       (uint64_t)rl.rlim_cur);
	kvt_prom_help(b, "process_start_time_seconds", "gauge",
		      "Start time of the process since unix epoch in seconds.");
	kvt_textbuf_printf(b, "process_start_time_seconds %.2f\n",
			   boot_time() + (double)start_ticks() / (double)(hz > 0 ? hz : 100));
	kvt_prom_help(b, "process_cpu_seconds_total", "counter",
		      "Total user and system CPU time spent in seconds.");
	kvt_textbuf_printf(b, "process_cpu_seconds_total %.6f\n",
			   (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
			   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
}
