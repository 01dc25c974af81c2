/* SPDX-License-Identifier: Apache-2.0 */
/* The benches' like-for-like reference: fio, run with the same engine,
 * block size, queue depth, O_DIRECT, bytes and kind of memory as the tier it
 * is compared with; and that memory itself (explicit huge pages where some
 * are reserved, else 4 KiB pages, never transparent huge pages, which fio
 * cannot ask for). fio writes its buffers as they are (--scramble_buffers=0),
 * as the tier does: by default it rewrites part of each buffer before each
 * write, about 6 ms of CPU per 32 MiB here, which made its writes slower than
 * the device and the tier's ratio above 1. And it issues each I/O as a slot
 * frees (--iodepth_batch_submit=1), as the tier keeps its window full:
 * submitting in batches of the queue depth let its queue drain between
 * batches, and its reads at queue depth 16 ran below its reads at 1. */
#include "bench/bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <jansson.h>

bool kvt_bench_have_fio(void)
{
	return system("fio --version >/dev/null 2>&1") == 0;
}

uint64_t kvt_bench_huge_free(void)
{
	unsigned long long free_pages = 0, kib = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Free: %llu", &free_pages);
		sscanf(line, "Hugepagesize: %llu kB", &kib);
	}
	fclose(f);
	return (uint64_t)free_pages * kib * 1024;
}

void *kvt_bench_region(size_t len, bool huge)
{
	void *p;

	if (huge) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	} else {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		/* fio's buffers are 4 KiB pages: so are these, whatever THP says */
		if (p != MAP_FAILED)
			madvise(p, len, MADV_NOHUGEPAGE);
	}
	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0, len);
	return p;
}

int kvt_bench_fio(const struct kvt_bench_fio_job *j, struct kvt_bench_fio_result *out)
{
	char cmd[8192], sync_opt[64] = "";
	json_error_t jerr;
	json_t *root, *job, *side, *pct;
	FILE *p;
	int err = -EIO;

	memset(out, 0, sizeof(*out));
	if (j->fdatasync)
		snprintf(sync_opt, sizeof(sync_opt), "--fdatasync=%u", j->fdatasync);
	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvt --filename='%s' --rw=%s --bs=%llu --iodepth=%u "
		 "--ioengine=io_uring --direct=1 --size=%llu --fixedbufs=1 --registerfiles=1 "
		 "--scramble_buffers=0 "
		 "--iodepth_batch_submit=1 --iodepth_batch_complete_min=1 %s %s "
		 "--percentile_list=50:99 --output-format=json 2>/dev/null",
		 j->file, j->write ? "write" : "read", (unsigned long long)j->block, j->qd,
		 (unsigned long long)j->bytes, j->huge ? "--iomem=shmhuge" : "", sync_opt);
	p = popen(cmd, "r");
	if (!p)
		return -EIO;
	root = json_loadf(p, JSON_DISABLE_EOF_CHECK, &jerr);
	pclose(p);
	if (!root)
		return -EIO;
	job = json_array_get(json_object_get(root, "jobs"), 0);
	side = json_object_get(job, j->write ? "write" : "read");
	pct = json_object_get(json_object_get(side, "clat_ns"), "percentile");
	if (side && pct) {
		out->mbps = json_number_value(json_object_get(side, "bw_bytes")) / 1e6;
		out->p50_us = json_number_value(json_object_get(pct, "50.000000")) / 1e3;
		out->p99_us = json_number_value(json_object_get(pct, "99.000000")) / 1e3;
		err = out->mbps > 0 ? 0 : -EIO;
	}
	json_decref(root);
	return err;
}
