/* SPDX-License-Identifier: Apache-2.0 */
/* Paged KV gather/scatter kernels. One thread block (CTA) row copies one
 * chunk — a page of one layer's K, V or latent tensor, contiguous on both
 * sides — split over gridDim.y CTAs when chunks are large. The block side may
 * be device memory or mapped pinned host memory (zero-copy over PCIe), so each
 * thread keeps several loads in flight before it stores. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/gather_kernels.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr unsigned kMaxSplit = 64;

template <typename V>
__global__ void __launch_bounds__(kThreads) gs_kernel(const kvt_gs_args a)
{
	const char *s;
	char *d;

	kvt_gs_chunk(&a, blockIdx.x, &s, &d);
	const V *src = (const V *)s;
	V *dst = (V *)d;

	const uint64_t n = a.chunk_bytes / sizeof(V);
	const uint64_t stride = (uint64_t)gridDim.y * blockDim.x;
	uint64_t i = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;

	for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
		V r[kUnroll];
#pragma unroll
		for (int u = 0; u < kUnroll; u++)
			r[u] = src[i + u * stride];
#pragma unroll
		for (int u = 0; u < kUnroll; u++)
			dst[i + u * stride] = r[u];
	}
	for (; i < n; i += stride)
		dst[i] = src[i];
}

template <typename V>
cudaError_t launch(const kvt_gs_args *a, cudaStream_t s)
{
	const uint64_t chunks = kvt_gs_chunks(a);
	const uint64_t vecs = a->chunk_bytes / sizeof(V);
	uint64_t split = (vecs + kThreads * kUnroll - 1) / (kThreads * kUnroll);

	if (chunks == 0)
		return cudaSuccess;
	if (chunks > 0x7fffffffu)
		return cudaErrorInvalidValue;
	if (split < 1)
		split = 1;
	if (split > kMaxSplit)
		split = kMaxSplit;
	gs_kernel<V><<<dim3((unsigned)chunks, (unsigned)split), kThreads, 0, s>>>(*a);
	return cudaGetLastError();
}

} // namespace

extern "C" int kvt_cuda_gs_launch(const struct kvt_gs_args *a, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	uint64_t align = a->base_align;
	uint64_t addrs = a->block_off;

	/* the widest access that every address of both sides allows */
	for (uint32_t i = 0; i < a->n_blocks; i++)
		addrs |= a->blocks[i];
	while (align > 1 && (addrs & (align - 1)))
		align /= 2;
	switch (align) {
	case 16: return (int)launch<uint4>(a, s);
	case 8: return (int)launch<uint2>(a, s);
	case 4: return (int)launch<uint32_t>(a, s);
	case 2: return (int)launch<uint16_t>(a, s);
	default: return (int)launch<uint8_t>(a, s);
	}
}
