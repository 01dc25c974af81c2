/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench sidecar --tier ssd (bench_sidecar_ssd.c): its arguments and
 * one repetition's figures, shared with its devices' side
 * (bench_sidecar_ssd_dev.c: fio on each device, the daemon's per-device
 * STATS, the JSON rows of both). */
#ifndef KVT_BENCH_SIDECAR_SSD_H
#define KVT_BENCH_SIDECAR_SSD_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "kvtier/client.h"

#define E2E_MAX_DEVS 16

struct e2e_args {
	const char *dir;              /* dirs[0] */
	const char *dirs[E2E_MAX_DEVS]; /* --dir, repeated: a directory per device */
	unsigned n_dirs;
	const char *kvtierd;
	const char *codec; /* kvtierd --ssd-codec; NULL: raw */
	uint64_t dram, ws;
	uint32_t layers, xfer, workers, engines;
	int reps;
	int pages; /* 0 auto, 1 huge, 2 4k */
	bool json;
};

/* One device's figures of a repetition. */
struct e2e_dev {
	double fio_read_gbps, fio_write_gbps, fio_write_sync_gbps;
	uint64_t read_bytes, write_bytes, blocks; /* the daemon's, from STATS */
};

struct e2e_rep {
	double save_gbps, load_gbps, fio_read_gbps, fio_write_gbps, fio_write_sync_gbps;
	double load_rest_gbps;    /* the LOADs after the first */
	double ssd_ratio;         /* bytes written to SSD raw / stored (the codec) */
	uint64_t blocks_from_ssd;
	struct e2e_dev dev[E2E_MAX_DEVS]; /* with several --dir */
};

/* fio's side of one repetition on every device: on device d, in tops[d],
 * an n-th of bytes (whole blocks), the same block size and memory, one
 * device after the other; each device's rates into out->dev, their sums
 * into out->fio_* (the reference: the devices' summed speed). */
int kvt_e2e_fio(const struct e2e_args *a, char (*tops)[4096], bool huge, uint64_t block,
		uint64_t bytes, struct e2e_rep *out);

/* The daemon's per-device bytes read and written and blocks (STATS
 * tiers.ssd.devices) into out->dev. */
void kvt_e2e_dev_stats(struct kvt_client *c, const struct e2e_args *a, struct e2e_rep *out);

/* runs[i].devices: a row per device of repetition r. */
json_t *kvt_e2e_devices_json(const struct e2e_args *a, const struct e2e_rep *r);

#endif /* KVT_BENCH_SIDECAR_SSD_H */
