/* tuner/ceil_cublas.h: cuBLAS's bf16 GEMM, loaded at run time, as the reference for the GEMM ceiling */
#ifndef KF_TUNER_CEIL_CUBLAS_H
#define KF_TUNER_CEIL_CUBLAS_H

#include <stddef.h>

#include "core/err.h"
#include "runtime/cuda.h"

/* A cuBLAS handle on the current (primary) context, from libcublas.so.13 / .12 / libcublas.so
 * found by dlopen: kforge does not link cuBLAS, the ceiling uses it when the machine has it. */
typedef struct tune_cublas tune_cublas;

/* NULL with the reason in *e when no libcublas loads (KF_ERR_UNSUPPORTED) or cublasCreate fails
 * (KF_ERR_CUDA; KF_ERR_NOMEM). */
tune_cublas *tune_cublas_open(core_err *e);
void tune_cublas_close(tune_cublas *c);
/* The library's file name and version ("libcublas.so.13 (130100)"). */
const char *tune_cublas_name(const tune_cublas *c);

/* C = A B^T for row-major n x n bf16 A, B, C (C[i][j] = sum_k A[i][k] B[j][k]), fp32
 * accumulation, on the default stream. 0, or -1 with the cuBLAS status in *e (KF_ERR_CUDA). */
int tune_cublas_gemm_bf16(tune_cublas *c, CUdeviceptr a, CUdeviceptr b, CUdeviceptr out, int n, core_err *e);

#endif
