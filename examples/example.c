/* flashgdn C ABI on the CPU: one chunked forward over DLPack tensors, then a deliberate error.
 *
 *   cc -std=c11 example.c $(pkg-config --cflags --libs flashgdn) -lm   (installed shared library)
 *   cc -std=c11 -I include example.c -L build -lflashgdn -lm          (build tree)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flashgdn/flashgdn.h"

enum { B = 2, T = 50, HQK = 2, HV = 4, K = 64, V = 64 };

/* A compact CPU float32 DLTensor (strides NULL = row-major). */
static DLTensor f32_tensor(float* data, int ndim, int64_t* shape) {
  DLTensor t;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

static float* alloc_random(size_t n, float lo, float hi) {
  float* x = (float*)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) x[i] = lo + (hi - lo) * (float)rand() / (float)RAND_MAX;
  return x;
}

int main(void) {
  int64_t qk_shape[4] = {B, T, HQK, K}, v_shape[4] = {B, T, HV, V}, g_shape[3] = {B, T, HV};
  int64_t state_shape[4] = {B, HV, K, V};
  float* q = alloc_random(B * T * HQK * K, -1.f, 1.f);
  float* k = alloc_random(B * T * HQK * K, -1.f, 1.f);
  float* v = alloc_random(B * T * HV * V, -1.f, 1.f);
  float* g = alloc_random(B * T * HV, -1.f, 0.f); /* log decay <= 0 */
  float* beta = alloc_random(B * T * HV, 0.f, 1.f);
  float* o = (float*)calloc(B * T * HV * V, sizeof(float));
  float* ht = (float*)calloc(B * HV * K * V, sizeof(float));

  DLTensor tq = f32_tensor(q, 4, qk_shape), tk = f32_tensor(k, 4, qk_shape), tv = f32_tensor(v, 4, v_shape);
  DLTensor tg = f32_tensor(g, 3, g_shape), tb = f32_tensor(beta, 3, g_shape);
  DLTensor to = f32_tensor(o, 4, v_shape), tht = f32_tensor(ht, 4, state_shape);

  flashgdn_chunk_fwd_params p;
  flashgdn_chunk_fwd_params_init(&p); /* scale 0 = K^-1/2, chunk 64, no initial state */
  p.q = &tq;
  p.k = &tk;
  p.v = &tv;
  p.g = &tg;
  p.beta = &tb;
  p.o = &to;
  p.final_state = &tht;
  p.use_qk_l2norm_in_kernel = 1;

  size_t ws = 0;
  int rc = flashgdn_chunk_fwd_workspace_size(&p, &ws); /* 0 on the CPU */
  if (rc == FLASHGDN_OK) rc = flashgdn_chunk_fwd(&p, NULL, 0, NULL);
  if (rc != FLASHGDN_OK) {
    fprintf(stderr, "flashgdn_chunk_fwd failed (%d): %s\n", rc, flashgdn_last_error());
    return 1;
  }
  double norm = 0;
  for (int i = 0; i < B * HV * K * V; ++i) norm += (double)ht[i] * ht[i];
  printf("flashgdn %s (CUDA available: %d): |final_state| = %.6f\n", flashgdn_version(), flashgdn_cuda_available(),
         sqrt(norm));

  /* A bad call: chunk_size 48 is rejected, nothing is written, the message says why. The copy is the
   * caller's and outlives later calls (flashgdn_last_error()'s pointer is rewritten by the next call). */
  p.chunk_size = 48;
  rc = flashgdn_chunk_fwd(&p, NULL, 0, NULL);
  char msg[512];
  flashgdn_copy_last_error(msg, sizeof msg);
  printf("expected error %d: %s\n", rc, msg);

  free(q), free(k), free(v), free(g), free(beta), free(o), free(ht);
  return rc == FLASHGDN_ERROR_INVALID_ARGUMENT ? 0 : 1;
}
