/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU table: public datasheet figures, and MIG slices of them.
 *
 * Memory is the datasheet's GB x 10^9 (what nvidia-smi shows is a little
 * more or less); FLOP/s are dense tensor-core figures, half the "with
 * sparsity" ones the datasheets headline. Sources are listed in docs/sizing.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvtier/model.h"

#define GB 1e9
#define TB 1e12
#define TF 1e12

static const struct kvt_gpu gpus[] = {
	{ "A100-40GB", 40 * (uint64_t)GB, 1.555 * TB, 312 * TF, 0, 4, 0,
	  "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb", "NVIDIA A100 datasheet (SXM4 40GB)" },
	{ "A100-80GB", 80 * (uint64_t)GB, 2.039 * TB, 312 * TF, 0, 4, 0,
	  "1g.10gb,1g.20gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb", "NVIDIA A100 datasheet (SXM4 80GB)" },
	{ "H100-SXM", 80 * (uint64_t)GB, 3.35 * TB, 989 * TF, 1979 * TF, 5, 0,
	  "1g.10gb,1g.20gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb", "NVIDIA H100 datasheet (SXM5)" },
	{ "H100-PCIe", 80 * (uint64_t)GB, 2.0 * TB, 756 * TF, 1513 * TF, 5, 0,
	  "1g.10gb,1g.20gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb", "NVIDIA H100 datasheet (PCIe)" },
	{ "H200", 141 * (uint64_t)GB, 4.8 * TB, 989 * TF, 1979 * TF, 5, 0,
	  "1g.18gb,1g.35gb,2g.35gb,3g.71gb,4g.71gb,7g.141gb", "NVIDIA H200 datasheet (SXM)" },
	{ "GH200", 96 * (uint64_t)GB, 4.0 * TB, 989 * TF, 1979 * TF, 5, 450 * GB,
	  "1g.12gb,1g.24gb,2g.24gb,3g.48gb,4g.48gb,7g.96gb",
	  "NVIDIA GH200 Grace Hopper datasheet (96GB HBM3; C2C 900 GB/s both ways)" },
	{ "B200", 180 * (uint64_t)GB, 8.0 * TB, 2250 * TF, 4500 * TF, 5, 0,
	  "1g.23gb,1g.45gb,2g.45gb,3g.90gb,4g.90gb,7g.180gb",
	  "NVIDIA HGX B200 datasheet (per GPU; Gen5 hosts)" },
	{ "L40S", 48 * (uint64_t)GB, 0.864 * TB, 362 * TF, 733 * TF, 4, 0, NULL,
	  "NVIDIA L40S datasheet" },
	{ "L4", 24 * (uint64_t)GB, 0.300 * TB, 121 * TF, 242 * TF, 4, 0, NULL,
	  "NVIDIA L4 datasheet" },
	{ "A10", 24 * (uint64_t)GB, 0.600 * TB, 125 * TF, 0, 4, 0, NULL, "NVIDIA A10 datasheet" },
};

#define N_GPUS (sizeof(gpus) / sizeof(gpus[0]))

const struct kvt_gpu *kvt_gpu_at(size_t i)
{
	return i < N_GPUS ? &gpus[i] : NULL;
}

/* Compare names ignoring case and '-', '_', ' '. */
static bool name_eq(const char *a, const char *b, size_t blen)
{
	const char *bend = b + blen;

	for (;;) {
		while (*a == '-' || *a == '_' || *a == ' ')
			a++;
		while (b < bend && (*b == '-' || *b == '_' || *b == ' '))
			b++;
		if (!*a || b == bend)
			return !*a && b == bend;
		if ((*a | 0x20) != (*b | 0x20))
			return false;
		a++;
		b++;
	}
}

/* Does the comma-separated list hold profile (case-insensitive)? */
static bool has_profile(const char *list, const char *profile)
{
	size_t n = strlen(profile);

	while (list && *list) {
		const char *end = strchr(list, ',');
		size_t len = end ? (size_t)(end - list) : strlen(list);

		if (len == n && !strncasecmp(list, profile, n))
			return true;
		list = end ? end + 1 : NULL;
	}
	return false;
}

int kvt_gpu_find(const char *name, const char *mig, struct kvt_gpu *out)
{
	const char *slash;
	size_t len;
	unsigned g, mem_gb;
	double mem_slices;

	if (!name || !out)
		return -EINVAL;
	slash = strchr(name, '/');
	len = slash ? (size_t)(slash - name) : strlen(name);
	if (slash && !mig)
		mig = slash + 1;
	for (size_t i = 0; i < N_GPUS; i++) {
		if (!name_eq(gpus[i].name, name, len))
			continue;
		*out = gpus[i];
		if (!mig || !*mig)
			return 0;
		if (!has_profile(gpus[i].mig, mig) || sscanf(mig, "%ug.%ugb", &g, &mem_gb) != 2)
			return -ENOENT;
		/* a slice gets the memory its name says, the bandwidth of its
		 * share of the 8 memory slices, the FLOP/s of its g of 7 */
		mem_slices = (double)mem_gb * GB * 8 / (double)gpus[i].mem_bytes;
		mem_slices = mem_slices < 1 ? 1 : (double)(long)(mem_slices + 0.5);
		out->mem_bytes = (uint64_t)mem_gb * (uint64_t)GB;
		out->mem_bw = gpus[i].mem_bw * mem_slices / 8;
		out->bf16_flops = gpus[i].bf16_flops * g / 7;
		out->fp8_flops = gpus[i].fp8_flops * g / 7;
		out->mig = NULL;
		snprintf(out->name, sizeof(out->name), "%.20s/%.20s", gpus[i].name, mig);
		return 0;
	}
	return -ENOENT;
}

size_t kvt_gpu_suggest(const char *name, char *buf, size_t len)
{
	size_t n = 0, used = 0, want;

	if (!buf || !len)
		return 0;
	buf[0] = 0;
	want = name ? strcspn(name, "/") : 0;
	/* the table's names that start with what was given ("H100": H100-SXM
	 * and H100-PCIe), separators and case aside */
	for (size_t i = 0; want && i < N_GPUS; i++) {
		const char *g = gpus[i].name, *a = name, *aend = name + want;

		for (;;) {
			while (a < aend && (*a == '-' || *a == '_' || *a == ' '))
				a++;
			while (*g == '-' || *g == '_' || *g == ' ')
				g++;
			if (a == aend || !*g || (*a | 0x20) != (*g | 0x20))
				break;
			a++;
			g++;
		}
		if (a != aend)
			continue;
		used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s",
					 n ? ", " : "", gpus[i].name);
		n++;
	}
	if (used >= len)
		buf[len - 1] = 0;
	return n;
}

double kvt_pcie_achieved_bw(uint32_t gen, const char **source)
{
	/* pinned host-to-device copies reach about 80% of the link after
	 * encoding (TLP headers, flow control, DMA setup) */
	static const struct { double bw; const char *source; } achieved[] = {
		[3] = { 12.0e9, "PCIe Gen3 x16 pinned host-to-device as CUDA's bandwidthTest "
				"reports it on Gen3 hosts, 11-13 GB/s of 15.8" },
		[4] = { 25.0e9, "PCIe Gen4 x16 pinned host-to-device as CUDA's bandwidthTest "
				"reports it on A100 hosts, 24-26 GB/s of 31.5" },
		[5] = { 52.0e9, "PCIe Gen5 x16 pinned host-to-device as CUDA's bandwidthTest "
				"reports it on H100 hosts, 50-55 GB/s of 63.0" },
		[6] = { 100.0e9, "PCIe Gen6 x16 estimated: Gen5's achieved share (83%) of "
				 "121 GB/s; no Gen6 host measured" },
	};

	if (gen >= sizeof(achieved) / sizeof(achieved[0]) || !achieved[gen].bw) {
		if (source)
			*source = NULL;
		return 0;
	}
	if (source)
		*source = achieved[gen].source;
	return achieved[gen].bw;
}

double kvt_pcie_bw(uint32_t gen)
{
	/* 16 lanes x GT/s x 128/130, in bytes */
	switch (gen) {
	case 3: return 16 * 8e9 * 128 / 130 / 8;
	case 4: return 16 * 16e9 * 128 / 130 / 8;
	case 5: return 16 * 32e9 * 128 / 130 / 8;
	case 6: return 16 * 64e9 * 242 / 256 / 8; /* FLIT mode */
	default: return 0;
	}
}
