/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier-bench sidecar --tier ssd over several devices (--dir repeated, the
 * daemon's --ssd-dir): fio on each device and their sum, the reference; the
 * daemon's bytes per device; a JSON row per device. See bench_sidecar_ssd.h. */
#include "bench/bench_sidecar_ssd.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench/bench.h"

int kvt_e2e_fio(const struct e2e_args *a, char (*tops)[4096], bool huge, uint64_t block,
		uint64_t bytes, struct e2e_rep *out)
{
	uint64_t share = bytes / a->n_dirs / block * block;
	int err = 0;

	out->fio_read_gbps = out->fio_write_gbps = out->fio_write_sync_gbps = 0;
	for (unsigned d = 0; d < a->n_dirs && !err; d++) {
		char file[4300];
		struct kvt_bench_fio_job j = { .file = file, .block = block,
					       .bytes = share ? share : block, .qd = 32,
					       .huge = huge, .write = true };
		struct kvt_bench_fio_result res;
		struct e2e_dev *o = &out->dev[d];

		snprintf(file, sizeof(file), "%s/fio.dat", tops[d]);
		err = kvt_bench_fio(&j, &res);
		o->fio_write_gbps = res.mbps / 1e3;
		if (!err) {
			j.write = false;
			err = kvt_bench_fio(&j, &res);
			o->fio_read_gbps = res.mbps / 1e3;
		}
		unlink(file);
		if (!err) {
			j.write = true;
			j.fdatasync = a->xfer;
			err = kvt_bench_fio(&j, &res);
			o->fio_write_sync_gbps = res.mbps / 1e3;
		}
		unlink(file);
		if (err)
			fprintf(stderr, "kvtier-bench: fio failed in %s\n", tops[d]);
		out->fio_read_gbps += o->fio_read_gbps;
		out->fio_write_gbps += o->fio_write_gbps;
		out->fio_write_sync_gbps += o->fio_write_sync_gbps;
	}
	return err;
}

void kvt_e2e_dev_stats(struct kvt_client *c, const struct e2e_args *a, struct e2e_rep *out)
{
	char *text = NULL;
	json_t *root, *devs;

	if (a->n_dirs < 2 || kvt_client_stats(c, &text))
		return;
	root = json_loads(text, 0, NULL);
	free(text);
	devs = json_object_get(json_object_get(json_object_get(root, "tiers"), "ssd"), "devices");
	for (unsigned d = 0; d < a->n_dirs && d < json_array_size(devs); d++) {
		json_t *o = json_array_get(devs, d);

		out->dev[d].read_bytes = (uint64_t)json_integer_value(json_object_get(o, "read_bytes"));
		out->dev[d].write_bytes =
			(uint64_t)json_integer_value(json_object_get(o, "write_bytes"));
		out->dev[d].blocks = (uint64_t)json_integer_value(json_object_get(o, "blocks"));
	}
	json_decref(root);
}

json_t *kvt_e2e_devices_json(const struct e2e_args *a, const struct e2e_rep *r)
{
	json_t *arr = json_array();

	for (unsigned d = 0; d < a->n_dirs; d++) {
		const struct e2e_dev *v = &r->dev[d];
		json_t *o = json_object();

		json_object_set_new(o, "dir", json_string(a->dirs[d]));
		json_object_set_new(o, "fio_read_gbps", json_real(v->fio_read_gbps));
		json_object_set_new(o, "fio_write_gbps", json_real(v->fio_write_gbps));
		json_object_set_new(o, "fio_write_sync_gbps", json_real(v->fio_write_sync_gbps));
		json_object_set_new(o, "kvtierd_read_bytes", json_integer((json_int_t)v->read_bytes));
		json_object_set_new(o, "kvtierd_write_bytes",
				    json_integer((json_int_t)v->write_bytes));
		json_object_set_new(o, "kvtierd_blocks", json_integer((json_int_t)v->blocks));
		json_array_append_new(arr, o);
	}
	return arr;
}
