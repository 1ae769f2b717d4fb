// The C ABI (include/h3s/h3s.h) over h3s::Engine: exceptions become error
// codes plus a per-thread message.
#include <cstring>
#include <string>

#include "h3s/engine.hpp"
#include "h3s/h3s.h"

struct h3s_engine {
  h3s::Engine engine;
};

namespace {

thread_local std::string last_error;

int fail_with(int code, const std::string& message) {
  last_error = message;
  return code;
}

// Runs f, turning any exception into an error code and the message.
template <class F>
int guarded(F&& f) {
  try {
    last_error.clear();
    f();
    return H3S_OK;
  } catch (const h3s::Error& e) {
    return fail_with(int(e.kind()) + 1, e.what());
  } catch (const std::bad_alloc&) {
    return fail_with(H3S_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return fail_with(H3S_INTERNAL, e.what());
  }
}

h3s::ArrayRef array_of(const h3s_array& a, const char* name) {
  if (a.ndim < 0 || a.ndim > 8 || (a.ndim > 0 && a.shape == nullptr))
    throw h3s::Error(h3s::ErrorKind::invalid_argument,
                     std::string(name) + ": ndim must be 0..8 with a shape array");
  if (a.dtype < H3S_BF16 || a.dtype > H3S_U8)
    throw h3s::Error(
        h3s::ErrorKind::invalid_argument,
        std::string(name) + ": dtype " + std::to_string(a.dtype) + " is not an H3S_ dtype code");
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] < 0)
      throw h3s::Error(h3s::ErrorKind::invalid_argument,
                       std::string(name) + ": dimension " + std::to_string(i) + " is " +
                           std::to_string(a.shape[i]) + " (a size must be >= 0)");
  h3s::ArrayRef r;
  r.dtype = h3s::DType(a.dtype);
  r.shape.assign(a.shape, a.shape + a.ndim);
  r.data = a.data;
  return r;
}

void expect_bytes(size_t given, const h3s::ArrayRef& like, const char* name) {
  if (given != like.bytes())
    throw h3s::Error(h3s::ErrorKind::invalid_argument,
                     std::string(name) + ": " + std::to_string(given) + " bytes given, " +
                         std::to_string(like.bytes()) + " needed (the latent's shape and dtype)");
}

}  // namespace

extern "C" {

int h3s_abi_version(void) {
  return H3S_ABI_VERSION;
}

const char* h3s_version(void) {
  static const std::string v = h3s::version();
  return v.c_str();
}

const char* h3s_last_error(void) {
  return last_error.c_str();
}

void h3s_options_init(h3s_options* o) {
  const h3s::Options d;
  o->streamed = d.mode == h3s::ExecMode::streamed;
  o->q_chunk = d.q_chunk;
  o->kv_chunk = d.kv_chunk;
  o->mlp_chunk = d.mlp_chunk;
  o->min_tokens = d.min_tokens;
  o->kv_block = d.kv_block;
  o->final_layer_chunk = d.final_layer_chunk;
  o->final_layer_gemm_streamed = d.final_layer_gemm == h3s::FinalLayerGemm::streamed;
  o->trim_forward = d.trim_forward;
  o->self_check = d.self_check;
  o->merge_tail_below = d.merge_tail_below;
  o->vram_budget = d.vram_budget;
  o->kv_placement = int(d.kv_placement);
  o->host_budget = d.host_budget;
  o->kv_store = nullptr;  // the exact store (d.kv_store)
  o->exact_av_rows = d.exact_av_rows;
  o->kv_mix_heads = nullptr;
  o->kv_mix_heads_count = 0;
  o->kv_mix_count = d.kv_mix_count;
}

void h3s_forward_args_init(h3s_forward_args* a) {
  std::memset(a, 0, sizeof(*a));
  const h3s::LatentInputs d;
  a->sigma = d.sigma;
  a->audio_scale = d.audio_scale;
  a->seed = d.seed;
  a->visual_cond_noise_aug = d.visual_cond_noise_aug;
}

int h3s_engine_open(const char* checkpoint, const char* backend, int device, h3s_engine** out) {
  return guarded([&] {
    if (out == nullptr || checkpoint == nullptr)
      throw h3s::Error(h3s::ErrorKind::invalid_argument,
                       "h3s_engine_open: checkpoint and out must not be NULL");
    *out = nullptr;
    h3s::EngineSetup setup;
    setup.backend = backend ? backend : "cpu";
    setup.device = device;
    *out = new h3s_engine{h3s::Engine::from_checkpoint(checkpoint, setup)};
  });
}

void h3s_engine_close(h3s_engine* engine) {
  delete engine;
}

int h3s_engine_info(const h3s_engine* engine, h3s_model_info* out) {
  return guarded([&] {
    if (engine == nullptr || out == nullptr)
      throw h3s::Error(h3s::ErrorKind::invalid_argument,
                       "h3s_engine_info: engine and out must not be NULL");
    const h3s::ModelInfo i = engine->engine.info();
    std::memset(out, 0, sizeof(*out));
    std::strncpy(out->format, i.format.c_str(), sizeof(out->format) - 1);
    out->hidden = i.hidden;
    out->blocks = i.blocks;
    out->heads = i.heads;
    out->text_dim = i.text_dim;
    out->video_latent = i.video_latent;
    out->audio_latent = i.audio_latent;
  });
}

int h3s_forward(h3s_engine* engine, const h3s_forward_args* args, const h3s_options* options,
                void* video_out, size_t video_out_bytes, void* audio_out, size_t audio_out_bytes) {
  return guarded([&] {
    if (engine == nullptr || args == nullptr || video_out == nullptr || audio_out == nullptr)
      throw h3s::Error(h3s::ErrorKind::invalid_argument,
                       "h3s_forward: engine, args, video_out and audio_out must not be NULL");
    h3s::LatentInputs in;
    in.video_latent = array_of(args->video_latent, "video_latent");
    in.audio_latent = array_of(args->audio_latent, "audio_latent");
    in.context = array_of(args->context, "context");
    in.sigma = args->sigma;
    if (args->cond_latent) in.cond_latent = array_of(*args->cond_latent, "cond_latent");
    in.audio_scale = args->audio_scale;
    in.seed = args->seed;
    in.visual_cond_noise_aug = args->visual_cond_noise_aug;
    expect_bytes(video_out_bytes, in.video_latent, "video_out");
    expect_bytes(audio_out_bytes, in.audio_latent, "audio_out");
    h3s::Options o;
    if (options) {
      o.mode = options->streamed ? h3s::ExecMode::streamed : h3s::ExecMode::stock;
      o.q_chunk = options->q_chunk;
      o.kv_chunk = options->kv_chunk;
      o.mlp_chunk = options->mlp_chunk;
      o.min_tokens = options->min_tokens;
      o.kv_block = options->kv_block;
      o.final_layer_chunk = options->final_layer_chunk;
      o.final_layer_gemm = options->final_layer_gemm_streamed ? h3s::FinalLayerGemm::streamed
                                                              : h3s::FinalLayerGemm::exact;
      o.trim_forward = options->trim_forward != 0;
      o.self_check = options->self_check != 0;
      o.merge_tail_below = options->merge_tail_below;
      o.vram_budget = options->vram_budget;
      if (options->kv_placement < 0 || options->kv_placement > 2)
        throw h3s::Error(h3s::ErrorKind::invalid_argument,
                         "h3s_options.kv_placement = " + std::to_string(options->kv_placement) +
                             " is not valid: use 0 (auto), 1 (device) or 2 (host)");
      o.kv_placement = h3s::KvPlacement(options->kv_placement);
      o.host_budget = options->host_budget;
      // NULL: the exact store (the default); a name is parsed (the error names it).
      if (options->kv_store != nullptr) o.kv_store = h3s::parse_kv_tier(options->kv_store);
      o.exact_av_rows = options->exact_av_rows != 0;
      if (options->kv_mix_heads_count < 0 ||
          (options->kv_mix_heads_count > 0 && options->kv_mix_heads == nullptr))
        throw h3s::Error(
            h3s::ErrorKind::invalid_argument,
            "h3s_options.kv_mix_heads_count = " + std::to_string(options->kv_mix_heads_count) +
                " needs that many heads in kv_mix_heads (NULL and 0 for none)");
      o.kv_mix_heads.assign(options->kv_mix_heads,
                            options->kv_mix_heads + options->kv_mix_heads_count);
      o.kv_mix_count = options->kv_mix_count;
      o.validate();  // names the bad control (kv_store, kv_mix_heads, ...)
    }
    const h3s::LatentOutputs r = engine->engine.forward(in, o);
    std::memcpy(video_out, r.video.bytes.data(), r.video.bytes.size());
    std::memcpy(audio_out, r.audio.bytes.data(), r.audio.bytes.size());
  });
}

}  // extern "C"
