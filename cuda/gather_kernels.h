/* SPDX-License-Identifier: Apache-2.0 */
/* The gather/scatter kernels' launcher, callable from C (cuda_backend.c). */
#ifndef KVT_CUDA_GATHER_KERNELS_H
#define KVT_CUDA_GATHER_KERNELS_H

#include "cuda/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch one gather/scatter of args on stream (a cudaStream_t). The widest
 * vector access every address allows is used. Returns a cudaError_t (0 on
 * success); args is copied into the launch. */
int kvt_cuda_gs_launch(const struct kvt_gs_args *args, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KVT_CUDA_GATHER_KERNELS_H */
