/* The h3stream C ABI: a handful of functions over the same engine as the C++
 * API (h3s/engine.hpp), for programs in C and for other languages' FFIs.
 * Every function returns 0 (H3S_OK) or an error code; h3s_last_error() then
 * holds the message (per thread), which names the operand and the fix.
 *
 *   h3s_engine* e = NULL;
 *   if (h3s_engine_open("h3_int8.safetensors", "cpu", 0, &e) != H3S_OK)
 *     fprintf(stderr, "%s\n", h3s_last_error());
 *   h3s_forward_args a;  h3s_forward_args_init(&a);   ... set the arrays, sigma
 *   h3s_forward(e, &a, NULL, video_out, video_bytes, audio_out, audio_bytes);
 *   h3s_engine_close(e);
 */
#ifndef H3S_H3S_H
#define H3S_H3S_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define H3S_ABI_VERSION 3

/* Error codes (h3s::ErrorKind + 1). */
enum {
  H3S_OK = 0,
  H3S_INVALID_ARGUMENT = 1,
  H3S_OUT_OF_MEMORY = 2,
  H3S_BAD_INPUT = 3,
  H3S_INTERNAL = 4
};

/* Element types (h3s::DType). */
enum { H3S_BF16 = 0, H3S_F16 = 1, H3S_F32 = 2, H3S_I8 = 3, H3S_I32 = 4, H3S_U8 = 5 };

typedef struct h3s_engine h3s_engine;

/* A host array: dense, row-major. */
typedef struct {
  int dtype;
  int ndim;
  const int64_t* shape;
  const void* data;
} h3s_array;

/* The controls of h3s::Options; h3s_options_init sets the defaults. */
typedef struct {
  int streamed; /* 1: streamed blocks (same bits as stock), 0: stock */
  int64_t q_chunk, kv_chunk, mlp_chunk, min_tokens, kv_block, final_layer_chunk;
  int final_layer_gemm_streamed; /* 0: exact, 1: streamed */
  int trim_forward, self_check;
  int64_t merge_tail_below;
  uint64_t vram_budget; /* bytes; 0: no limit */
  int kv_placement;     /* 0: auto, 1: device, 2: host-staged (since ABI 2) */
  uint64_t host_budget; /* host staging bytes; 0: available memory less a tenth (ABI 2) */
  /* The K/V storage tier (ABI 3): "bf16" (exact; NULL too) or an APPROXIMATE one,
   * "kvi8r", "kvi8s", "kvfp4s", "kvmix" (each streamed == its own stock, never the
   * exact store's bits); a GPU without the tier's kernel runs the exact store. */
  const char* kv_store;
  int exact_av_rows; /* 1: text and audio rows attend an exact K/V (their rows exact) */
  /* kvmix: the heads kept on 8 bits (NULL / 0: calibrated per block, kv_mix_count of
   * them, 0: half). */
  const int* kv_mix_heads;
  int64_t kv_mix_heads_count, kv_mix_count;
} h3s_options;

/* One forward on real inputs (h3s::LatentInputs); h3s_forward_args_init sets
 * the payload defaults (audio_scale 4, seed 0, visual_cond_noise_aug 0.999). */
typedef struct {
  h3s_array video_latent; /* [1, C, T, H, W] bf16 or f32 */
  h3s_array audio_latent; /* [1, 32, 2, frames] bf16 or f32 */
  h3s_array context;      /* [1, L, text_dim] bf16 */
  float sigma;
  const h3s_array* cond_latent; /* NULL: none */
  double audio_scale;
  uint64_t seed;
  double visual_cond_noise_aug;
} h3s_forward_args;

typedef struct {
  char format[16];
  int64_t hidden, blocks, heads, text_dim, video_latent, audio_latent;
} h3s_model_info;

int h3s_abi_version(void);
const char* h3s_version(void);
/* The message of this thread's last call that returns a status code: "" when it
   succeeded (each such call clears it). Valid until this thread's next such call. */
const char* h3s_last_error(void);

void h3s_options_init(h3s_options* options);
void h3s_forward_args_init(h3s_forward_args* args);

/* backend: "cpu" or "cuda"; device: the CUDA device. */
int h3s_engine_open(const char* checkpoint, const char* backend, int device, h3s_engine** out);
void h3s_engine_close(h3s_engine* engine);
int h3s_engine_info(const h3s_engine* engine, h3s_model_info* out);

/* Writes the predictions in the latents' dtypes and shapes into video_out and
 * audio_out (their byte sizes given, checked before any work). options: NULL
 * for the defaults. */
int h3s_forward(h3s_engine* engine, const h3s_forward_args* args, const h3s_options* options,
                void* video_out, size_t video_out_bytes, void* audio_out, size_t audio_out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* H3S_H3S_H */
