/* The C ABI (include/h3s/h3s.h) from C: open, info, forward stock and
 * streamed (the same bytes), and errors as codes with messages. argv[1]: a
 * tiny checkpoint (ctest makes it with h3s make-checkpoint). */
#include <h3s/h3s.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, \
              h3s_last_error());                                                              \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

/* bf16 bits of a value, by truncation (any bits will do for inputs). */
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static void fill(uint16_t* v, size_t n, unsigned seed, float scale) {
  unsigned s = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1103515245u + 12345u;
    v[i] = bf16_of(scale * ((float)((s >> 8) & 0xffff) / 32768.0f - 1.0f));
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CHECKPOINT\n", argv[0]);
    return 2;
  }
  CHECK(h3s_abi_version() == H3S_ABI_VERSION);
  CHECK(strlen(h3s_version()) > 0);

  h3s_engine* e = NULL;
  CHECK(h3s_engine_open("/no/such/file.safetensors", "cpu", 0, &e) != H3S_OK);
  CHECK(e == NULL);
  CHECK(strstr(h3s_last_error(), "/no/such/file.safetensors") != NULL);
  CHECK(h3s_engine_open(argv[1], "tpu", 0, &e) == H3S_INVALID_ARGUMENT);
  CHECK(h3s_engine_open(argv[1], "cpu", 0, &e) == H3S_OK);
  if (e == NULL) return 1;
  CHECK(h3s_last_error()[0] == '\0');

  h3s_model_info info;
  CHECK(h3s_engine_info(e, &info) == H3S_OK);
  CHECK(strcmp(info.format, "w4a8") == 0);
  CHECK(info.blocks == 1);

  const int64_t vshape[5] = {1, info.video_latent, 2, 4, 3};
  const int64_t ashape[4] = {1, info.audio_latent, 2, 5};
  const int64_t cshape[3] = {1, 6, info.text_dim};
  const size_t nv = (size_t)(info.video_latent * 2 * 4 * 3),
               na = (size_t)(info.audio_latent * 2 * 5), nc = (size_t)(6 * info.text_dim);
  uint16_t* video = malloc(nv * 2);
  uint16_t* audio = malloc(na * 2);
  uint16_t* context = malloc(nc * 2);
  uint16_t* out_v[2] = {malloc(nv * 2), malloc(nv * 2)};
  uint16_t* out_a[2] = {malloc(na * 2), malloc(na * 2)};
  fill(video, nv, 1, 1.0f);
  fill(audio, na, 2, 1.0f);
  fill(context, nc, 3, 0.5f);

  h3s_forward_args args;
  h3s_forward_args_init(&args);
  CHECK(args.audio_scale == 4.0);
  args.video_latent = (h3s_array){H3S_BF16, 5, vshape, video};
  args.audio_latent = (h3s_array){H3S_BF16, 4, ashape, audio};
  args.context = (h3s_array){H3S_BF16, 3, cshape, context};
  args.sigma = 0.8f;

  h3s_options stock, streamed;
  h3s_options_init(&stock);
  stock.streamed = 0;
  h3s_options_init(&streamed);
  streamed.q_chunk = 7;
  streamed.kv_chunk = 9;
  streamed.mlp_chunk = 4;
  streamed.min_tokens = 0;
  streamed.final_layer_chunk = 5;
  streamed.merge_tail_below = 0;
  CHECK(h3s_forward(e, &args, &stock, out_v[0], nv * 2, out_a[0], na * 2) == H3S_OK);
  CHECK(h3s_forward(e, &args, &streamed, out_v[1], nv * 2, out_a[1], na * 2) == H3S_OK);
  CHECK(memcmp(out_v[0], out_v[1], nv * 2) == 0);
  CHECK(memcmp(out_a[0], out_a[1], na * 2) == 0);
  CHECK(memcmp(out_v[0], video, nv * 2) != 0);
  /* The K/V staged in host memory (ABI 2): the same bits. */
  streamed.kv_placement = 2;
  memset(out_v[1], 0, nv * 2);
  CHECK(h3s_forward(e, &args, &streamed, out_v[1], nv * 2, out_a[1], na * 2) == H3S_OK);
  CHECK(memcmp(out_v[0], out_v[1], nv * 2) == 0);
  CHECK(memcmp(out_a[0], out_a[1], na * 2) == 0);
  streamed.kv_placement = 9;
  CHECK(h3s_forward(e, &args, &streamed, out_v[1], nv * 2, out_a[1], na * 2) ==
        H3S_INVALID_ARGUMENT);
  CHECK(strstr(h3s_last_error(), "kv_placement = 9") != NULL);
  streamed.kv_placement = 0;

  /* An approximate K/V tier (ABI 3): streamed == the tier's stock, never the exact
   * store's bits; a name that is no tier is refused by name. */
  {
    uint16_t* tier_v[2] = {malloc(nv * 2), malloc(nv * 2)};
    uint16_t* tier_a = malloc(na * 2);
    h3s_options tier_stock = stock, tier_streamed = streamed;
    tier_stock.kv_store = "kvfp4s";
    tier_streamed.kv_store = "kvfp4s";
    CHECK(h3s_forward(e, &args, &tier_stock, tier_v[0], nv * 2, tier_a, na * 2) == H3S_OK);
    CHECK(h3s_forward(e, &args, &tier_streamed, tier_v[1], nv * 2, tier_a, na * 2) == H3S_OK);
    CHECK(memcmp(tier_v[0], tier_v[1], nv * 2) == 0);
    CHECK(memcmp(tier_v[0], out_v[0], nv * 2) != 0);
    tier_streamed.kv_store = "kvi4";
    CHECK(h3s_forward(e, &args, &tier_streamed, tier_v[1], nv * 2, tier_a, na * 2) ==
          H3S_INVALID_ARGUMENT);
    CHECK(strstr(h3s_last_error(), "kv_store 'kvi4'") != NULL);
    const int heads[2] = {0, 0};
    tier_streamed.kv_store = "kvmix";
    tier_streamed.kv_mix_heads = heads;
    tier_streamed.kv_mix_heads_count = 2;
    CHECK(h3s_forward(e, &args, &tier_streamed, tier_v[1], nv * 2, tier_a, na * 2) ==
          H3S_INVALID_ARGUMENT);
    CHECK(strstr(h3s_last_error(), "listed twice") != NULL);
    free(tier_v[0]);
    free(tier_v[1]);
    free(tier_a);
  }

  /* Errors: a wrong output size, a NaN sigma, a bad control; nothing written. */
  memset(out_v[1], 0, nv * 2);
  CHECK(h3s_forward(e, &args, NULL, out_v[1], nv * 2 - 2, out_a[1], na * 2) ==
        H3S_INVALID_ARGUMENT);
  CHECK(strstr(h3s_last_error(), "video_out") != NULL);
  args.sigma = NAN;
  CHECK(h3s_forward(e, &args, NULL, out_v[1], nv * 2, out_a[1], na * 2) == H3S_INVALID_ARGUMENT);
  CHECK(strstr(h3s_last_error(), "sigma") != NULL);
  args.sigma = 0.8f;
  streamed.q_chunk = 0;
  CHECK(h3s_forward(e, &args, &streamed, out_v[1], nv * 2, out_a[1], na * 2) ==
        H3S_INVALID_ARGUMENT);
  CHECK(strstr(h3s_last_error(), "q_chunk") != NULL);
  {
    /* A negative size is named as such, not as a huge byte count. */
    const int64_t bad_shape[5] = {1, info.video_latent, -1, 4, 3};
    const h3s_array good_video = args.video_latent;
    args.video_latent.shape = bad_shape;
    CHECK(h3s_forward(e, &args, NULL, out_v[1], nv * 2, out_a[1], na * 2) ==
          H3S_INVALID_ARGUMENT);
    CHECK(strstr(h3s_last_error(), "video_latent: dimension 2 is -1") != NULL);
    args.video_latent = good_video;
  }
  size_t written = 0;
  for (size_t i = 0; i < nv; ++i) written += out_v[1][i] != 0;
  CHECK(written == 0);

  h3s_engine_close(e);
  free(video);
  free(audio);
  free(context);
  for (int i = 0; i < 2; ++i) {
    free(out_v[i]);
    free(out_a[i]);
  }
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
