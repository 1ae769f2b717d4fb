// h3s_embed CHECKPOINT INPUTS [OUTPUT]: load an H3 checkpoint, run the model on
// the latents of an inputs file (h3s make-inputs writes one), stock and then
// streamed, check that both gave the same bits, print a summary, and write
// the predictions when OUTPUT is given.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <h3s/h3s.hpp>
#include <string>

namespace {

// Mean |x| of a bf16 or f32 array, for the summary.
double mean_abs(const h3s::Array& a) {
  double sum = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float v;
    if (a.dtype == h3s::DType::bf16) {
      const uint32_t bits = uint32_t(a.data<uint16_t>()[i]) << 16;
      std::memcpy(&v, &bits, 4);
    } else {
      v = a.data<float>()[i];
    }
    sum += std::fabs(v);
  }
  return a.numel() ? sum / double(a.numel()) : 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s CHECKPOINT INPUTS [OUTPUT]\n", argv[0]);
    return 2;
  }
  try {
    h3s::Engine engine = h3s::Engine::from_checkpoint(argv[1]);
    const h3s::ModelInfo m = engine.info();
    std::printf("h3stream %s: %s model, %lld blocks, hidden %lld, on %s\n", h3s::version().c_str(),
                m.format.c_str(), static_cast<long long>(m.blocks),
                static_cast<long long>(m.hidden), engine.backend().c_str());

    const std::map<std::string, h3s::Array> in = h3s::load_arrays(argv[2]);
    h3s::LatentInputs inputs;
    inputs.video_latent = in.at("video_latent").ref();
    inputs.audio_latent = in.at("audio_latent").ref();
    inputs.context = in.at("context").ref();
    inputs.sigma = in.at("sigma").data<float>()[0];
    if (in.count("cond_latent")) inputs.cond_latent = in.at("cond_latent").ref();

    h3s::Options stock;
    stock.mode = h3s::ExecMode::stock;
    h3s::Options streamed;  // docs/FEATURES.md "Controls" defaults, all blocks streamed
    streamed.min_tokens = 0;
    streamed.q_chunk = streamed.kv_chunk = streamed.mlp_chunk = 64;
    const h3s::LatentOutputs a = engine.forward(inputs, stock);
    const h3s::LatentOutputs b = engine.forward(inputs, streamed);
    const bool equal = a.video.bytes == b.video.bytes && a.audio.bytes == b.audio.bytes;
    std::printf("%lld tokens: stock %.3f s (arena peak %zu bytes), streamed %.3f s (%zu bytes)\n",
                static_cast<long long>(a.report.tokens), a.report.seconds,
                a.report.arena_peak_bytes, b.report.seconds, b.report.arena_peak_bytes);
    std::printf("video mean |v| %.4f, audio mean |a| %.4f; streamed == stock: %s\n",
                mean_abs(a.video), mean_abs(a.audio), equal ? "yes" : "NO");
    if (argc == 4) {
      h3s::save_arrays(argv[3], {{"video", a.video}, {"audio", a.audio}});
      std::printf("wrote %s\n", argv[3]);
    }
    return equal ? 0 : 1;
  } catch (const h3s::Error& e) {
    std::fprintf(stderr, "h3s_embed: %s\n", e.what());
    return 1;
  } catch (const std::out_of_range&) {
    std::fprintf(stderr, "h3s_embed: %s lacks video_latent, audio_latent, context or sigma\n",
                 argv[2]);
    return 1;
  }
}
