// _Engine: BlockEngine for Python. Arrays arrive as DLPack views (no copy);
// checks that Python callers need as TypeError (dtype) happen here, the rest
// in BlockEngine (ValueError naming the argument).
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <limits>
#include <memory>

#include "core/arena.hpp"
#include "model/checkpoint.hpp"
#include "model/quant_linear.hpp"
#include "python/bindings.hpp"
#include "python/weights_from_arrays.hpp"
#include "runtime/block_engine.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using Run = std::tuple<int64_t, int64_t, int64_t>;
using Entry = std::tuple<std::string, std::string, ReadArray>;

// Engine state the Python side reads besides BlockEngine itself.
struct PyEngine {
  std::unique_ptr<BlockEngine> engine;
  std::optional<std::string> last_self_check;
};

std::unique_ptr<PyEngine> make(ModelWeights w, const std::string& backend, int device,
                               size_t memory_budget, int threads, size_t vram_budget) {
  auto e = std::make_unique<PyEngine>();
  e->engine = std::make_unique<BlockEngine>(std::move(w), backend, device, memory_budget, threads,
                                            vram_budget);
  return e;
}

std::vector<ArrayEntry> array_entries(const std::vector<Entry>& tensors) {
  std::vector<ArrayEntry> arrays;
  arrays.reserve(tensors.size());
  for (const auto& [name, dtype, array] : tensors) arrays.push_back({name, dtype, array});
  return arrays;
}

ExecMode parse_mode(const std::string& mode) {
  if (mode == "streamed") return ExecMode::streamed;
  if (mode == "stock") return ExecMode::stock;
  throw nb::value_error(
      fmt::format("mode '{}' is not valid: use 'streamed' or 'stock'", mode).c_str());
}

BlockPhases parse_phases(const std::string& phases) {
  if (phases == "all") return BlockPhases::all;
  if (phases == "attn") return BlockPhases::attn_only;
  throw nb::value_error(
      fmt::format("phases '{}' is not valid: use 'all' or 'attn'", phases).c_str());
}

// A CUDA array must sit on the engine's GPU, not only on "a" GPU.
template <class Array>
void expect_engine_gpu(const BlockEngine& e, const Array& a, const char* arg) {
  if (a.device_type() == nb::device::cuda::value && e.device_kind() == Device::cuda &&
      a.device_id() != e.device())
    throw nb::value_error(fmt::format("{}: is on {} but this engine runs on cuda:{}", arg,
                                      device_label(a.device_type(), a.device_id()), e.device())
                              .c_str());
}

template <class XArray>
TensorBlockCall make_call(const BlockEngine& e, int64_t index, const XArray& x,
                          const ReadArray& t_emb, const std::vector<Run>& mod_runs,
                          const ReadArray& rope, const std::string& mode,
                          const std::optional<ExecOptions>& options,
                          std::optional<uintptr_t> stream, const std::string& phases) {
  TensorBlockCall c;
  c.index = index;
  c.mode = parse_mode(mode);
  c.phases = parse_phases(phases);
  c.options = options.value_or(ExecOptions{});
  c.stream = stream.value_or(0);
  c.x = tensor_view(x, "x", {DType::bf16});
  const bool curve = e.config().time_form == TimeForm::curve;
  c.t_emb = tensor_view(t_emb, "t_emb", {curve ? DType::f32 : DType::bf16});
  c.rope = tensor_view(rope, "rope", {DType::bf16});
  expect_engine_gpu(e, x, "x");
  expect_engine_gpu(e, t_emb, "t_emb");
  expect_engine_gpu(e, rope, "rope");
  c.runs.reserve(mod_runs.size());
  for (const auto& [begin, end, row] : mod_runs) {
    if (row < 0 || row > std::numeric_limits<int32_t>::max())
      throw nb::value_error(fmt::format("mod_runs: mod_row {} is out of range", row).c_str());
    c.runs.push_back({begin, end, int32_t(row)});
  }
  return c;
}

nb::dict config_dict(const BlockEngine& e) {
  const ModelConfig& c = e.config();
  nb::dict d;
  d["name"] = c.name;
  d["hidden"] = c.hidden;
  d["heads"] = c.heads;
  d["head_dim"] = c.head_dim;
  d["inner"] = c.inner();
  d["ffn"] = c.ffn;
  d["blocks"] = c.blocks;
  d["refiner_blocks"] = c.refiner_blocks;
  d["text_dim"] = c.text_dim;
  d["time_dim"] = c.time_dim;
  d["time_form"] = std::string(c.time_form == TimeForm::curve ? "curve" : "full");
  d["time_freq_dim"] = c.time_freq_dim;
  d["time_hidden"] = c.time_hidden;
  d["curve_grid"] = c.curve_grid;
  d["rope_dim"] = c.rope_dim;
  d["rope_freqs"] = c.rope_freqs;
  d["video_latent"] = c.video_latent;
  d["audio_latent"] = c.audio_latent;
  d["eps"] = c.eps;
  d["format"] = std::string(format_name(e.weights().format));
  return d;
}

nb::list ledger_list(const BlockEngine& e) {
  nb::list out;
  for (const LedgerEntry& l : e.ledger()) {
    nb::dict d;
    d["block"] = l.block;
    d["phase"] = std::string(phase_name(l.phase));
    d["allocated_at_start"] = l.allocated_at_start;
    d["allocated"] = l.allocated_at_end;
    d["peak"] = l.peak;
    // The arena caches nothing: what it holds from its memory is what is live.
    d["reserved"] = l.allocated_at_end;
    out.append(d);
  }
  return out;
}

// A call's own weights: views of the caller's arrays (checked like a
// checkpoint's block), referenced until the call's end.
void attach_weights(PyEngine& e, TensorBlockCall& call,
                    const std::optional<std::vector<Entry>>& weights,
                    const std::map<std::string, std::string>& metadata) {
  if (!weights) return;
  const std::vector<ArrayEntry> arrays = array_entries(*weights);
  for (const ArrayEntry& a : arrays) expect_engine_gpu(*e.engine, a.array, a.name.c_str());
  std::shared_ptr<const void> keep_alive = keep_arrays_alive(arrays);
  const nb::gil_scoped_release unlocked;
  call.weights = load_block_from_arrays(arrays, metadata, e.engine->config(), call.index,
                                        std::move(keep_alive), call.stream);
}

nb::dict self_check_dict(const SelfCheckResult& r, int64_t tokens) {
  nb::dict d;
  d["line"] = r.line(tokens);
  d["all_equal"] = r.all_equal();
  nb::list variants;
  for (const SelfCheckResult::Variant& v : r.variants) {
    nb::dict vd;
    vd["name"] = v.name;
    vd["max_ulp"] = v.max_ulp;
    vd["mean_ulp"] = v.mean_ulp;
    vd["differing"] = v.differing;  // values whose bits differ (the verdict)
    variants.append(vd);
  }
  d["variants"] = variants;
  if (r.tier) {  // an approximate tier ran: its error against the exact store
    nb::dict t;
    t["kv_store"] = std::string(kv_tier_name(r.tier->store));
    t["approximate"] = true;
    t["rel_rms"] = r.tier->rel_rms;
    t["max_abs"] = r.tier->max_abs;
    d["tier"] = t;
  }
  if (r.tier_fallback) d["tier_fallback"] = std::string(kv_tier_name(*r.tier_fallback));
  return d;
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<PyEngine> c(m, "_Engine", "Native engine; use h3stream.Engine.");
  c.def_static(
      "from_checkpoint",
      [](const std::string& path, const std::string& backend, int device, size_t memory_budget,
         int threads, size_t vram_budget) {
        ModelWeights w;
        {
          const nb::gil_scoped_release unlocked;
          w = load_checkpoint(path);  // the file mapped and viewed in place
        }
        return make(std::move(w), backend, device, memory_budget, threads, vram_budget);
      },
      "path"_a, "backend"_a = "cpu", "device"_a = 0, "memory_budget"_a = 0, "threads"_a = 0,
      "vram_budget"_a = 0);
  c.def_static(
      "from_arrays",
      [](const std::vector<Entry>& tensors, const std::map<std::string, std::string>& metadata,
         const std::string& backend, int device, size_t memory_budget, int threads,
         bool lazy_blocks, size_t vram_budget) {
        const std::vector<ArrayEntry> arrays = array_entries(tensors);
        // The weights are views of the arrays, which this keeps referenced.
        std::shared_ptr<const void> keep_alive = keep_arrays_alive(arrays);
        ModelWeights w;
        {
          const nb::gil_scoped_release unlocked;
          w = load_weights_from_arrays(arrays, metadata, std::move(keep_alive), lazy_blocks);
        }
        return make(std::move(w), backend, device, memory_budget, threads, vram_budget);
      },
      "tensors"_a, "metadata"_a, "backend"_a = "cpu", "device"_a = 0, "memory_budget"_a = 0,
      "threads"_a = 0, "lazy_blocks"_a = false, "vram_budget"_a = 0);
  c.def(
      "load_block",
      [](PyEngine& e, int64_t index, const std::vector<Entry>& tensors,
         const std::map<std::string, std::string>& metadata) {
        const std::vector<ArrayEntry> arrays = array_entries(tensors);
        std::shared_ptr<const void> keep_alive = keep_arrays_alive(arrays);
        const nb::gil_scoped_release unlocked;
        e.engine->load_block(index, load_block_from_arrays(arrays, metadata, e.engine->config(),
                                                           index, std::move(keep_alive)));
      },
      "index"_a, "tensors"_a, "metadata"_a);
  c.def("drop_block", [](PyEngine& e, int64_t index) { e.engine->drop_block(index); });
  c.def("block_loaded",
        [](const PyEngine& e, int64_t index) { return e.engine->block_loaded(index); });
  c.def_prop_ro("config", [](const PyEngine& e) { return config_dict(*e.engine); });
  c.def_prop_ro("backend", [](const PyEngine& e) { return e.engine->backend_name(); });
  c.def_prop_ro("device", [](const PyEngine& e) { return e.engine->device(); });
  c.def_prop_ro("last_self_check", [](const PyEngine& e) { return e.last_self_check; });
  c.def_prop_ro(
      "kv_mix_heads", [](const PyEngine& e) { return e.engine->kv_mix_heads(); },
      "kv_store 'kvmix': the heads on 8 bits that each block's first call calibrated, by block "
      "index ({} until then, and when Options.kv_mix_heads gives them)");
  c.def_prop_ro("last_placement", [](const PyEngine& e) {
    const BlockEngine::PlacementReport r = e.engine->last_placement();
    nb::dict d;
    d["line"] = r.line;
    d["kv"] = r.kv_on_host ? "host-staged" : "device";
    nb::dict peaks;
    peaks["kv"] = r.predicted_kv;
    peaks["attn"] = r.predicted_attn;
    peaks["mlp"] = r.predicted_mlp;
    d["predicted_peaks"] = peaks;
    d["staged_to_host_bytes"] = r.staging.to_host_bytes;
    d["staged_to_device_bytes"] = r.staging.to_device_bytes;
    d["copy_seconds"] = r.staging.copy_seconds;
    d["exposed_copy_seconds"] = r.staging.exposed_seconds;
    return d;
  });
  c.def_prop_rw(
      "resident_weights", [](const PyEngine& e) { return e.engine->resident_weights(); },
      [](PyEngine& e, bool v) { e.engine->set_resident_weights(v); },
      "False: each block's prepared weights go after its call (at most one block of weights "
      "added to the host's VRAM; one preparation per call).");
  c.def_prop_ro("weight_bytes", [](const PyEngine& e) { return e.engine->weight_bytes(); });
  c.def_prop_ro("weight_peak_bytes",
                [](const PyEngine& e) { return e.engine->weight_peak_bytes(); });
  c.def(
      "run_block",
      [](PyEngine& e, int64_t index, WriteArray x, ReadArray t_emb, const std::vector<Run>& runs,
         ReadArray rope, const std::string& mode, const std::optional<ExecOptions>& options,
         std::optional<uintptr_t> stream, const std::string& phases,
         const std::optional<std::vector<Entry>>& weights,
         const std::map<std::string, std::string>& metadata) {
        TensorBlockCall call =
            make_call(*e.engine, index, x, t_emb, runs, rope, mode, options, stream, phases);
        attach_weights(e, call, weights, metadata);
        std::optional<std::string> line;
        ExecMode ran = ExecMode::stock;
        {
          const nb::gil_scoped_release unlocked;
          // self_check compares stock with streamed on copies whichever path then runs
          // (the forward checks block 0 below min_tokens too).
          if (call.options.self_check) line = e.engine->self_check(call).line(call.x.rows());
          ran = e.engine->run_block(call);
        }
        if (line) e.last_self_check = line;
        return std::string(ran == ExecMode::stock ? "stock" : "streamed");
      },
      "index"_a, "x"_a.noconvert(), "t_emb"_a.noconvert(), "mod_runs"_a, "rope"_a.noconvert(),
      nb::kw_only(), "mode"_a = "streamed", "options"_a = nb::none(), "stream"_a = nb::none(),
      "phases"_a = "all", "weights"_a = nb::none(),
      "metadata"_a = std::map<std::string, std::string>{});
  c.def(
      "self_check",
      [](PyEngine& e, int64_t index, ReadArray x, ReadArray t_emb, const std::vector<Run>& runs,
         ReadArray rope, const std::optional<ExecOptions>& options, std::optional<uintptr_t> stream,
         const std::optional<std::vector<Entry>>& weights,
         const std::map<std::string, std::string>& metadata) {
        // x is only read (the variants run on copies): a read-only view will do.
        TensorBlockCall call =
            make_call(*e.engine, index, x, t_emb, runs, rope, "streamed", options, stream, "all");
        attach_weights(e, call, weights, metadata);
        SelfCheckResult r;
        {
          const nb::gil_scoped_release unlocked;
          r = e.engine->self_check(call);
        }
        return self_check_dict(r, call.x.rows());
      },
      "index"_a, "x"_a.noconvert(), "t_emb"_a.noconvert(), "mod_runs"_a, "rope"_a.noconvert(),
      nb::kw_only(), "options"_a = nb::none(), "stream"_a = nb::none(), "weights"_a = nb::none(),
      "metadata"_a = std::map<std::string, std::string>{});
  c.def(
      "forward",
      [](PyEngine& e, ReadArray video, ReadArray audio, ReadArray context, float sigma,
         WriteArray video_out, WriteArray audio_out, std::optional<ReadArray> cond,
         const std::vector<uint8_t>& tags, double audio_scale, uint64_t seed, double aug,
         const std::string& mode, const std::optional<ExecOptions>& options) {
        LatentInputs in;
        in.video_latent = host_array_ref(video, "video_latent");
        in.audio_latent = host_array_ref(audio, "audio_latent");
        in.context = host_array_ref(context, "context");
        if (cond) in.cond_latent = host_array_ref(*cond, "cond_latent");
        in.sigma = sigma;
        in.text_token_tags = tags;
        in.audio_scale = audio_scale;
        in.seed = seed;
        in.visual_cond_noise_aug = aug;
        ExecOptions o = options.value_or(ExecOptions{});
        o.mode = parse_mode(mode);
        const ArrayRef vo = host_array_ref(video_out, "video_out");
        const ArrayRef ao = host_array_ref(audio_out, "audio_out");
        if (vo.shape != in.video_latent.shape || vo.dtype != in.video_latent.dtype ||
            ao.shape != in.audio_latent.shape || ao.dtype != in.audio_latent.dtype)
          throw nb::value_error("video_out/audio_out: must have the latents' shapes and dtypes");
        LatentOutputs out;
        {
          const nb::gil_scoped_release unlocked;
          out = e.engine->forward(in, o);
        }
        std::memcpy(const_cast<void*>(vo.data), out.video.bytes.data(), out.video.bytes.size());
        std::memcpy(const_cast<void*>(ao.data), out.audio.bytes.data(), out.audio.bytes.size());
        const ForwardReport& r = out.report;
        nb::dict d;
        d["tokens"] = r.tokens;
        d["seconds"] = r.seconds;
        d["arena_peak_bytes"] = r.arena_peak_bytes;
        d["weights_plan"] = r.weights_plan;
        d["placement"] = r.placement;
        d["kv_on_host"] = r.kv_on_host;
        d["staged_to_host_bytes"] = r.staged_to_host_bytes;
        d["staged_to_device_bytes"] = r.staged_to_device_bytes;
        d["streamed_blocks"] = r.streamed_blocks;
        d["stock_blocks"] = r.stock_blocks;
        d["log"] = r.log;
        return d;
      },
      "video_latent"_a.noconvert(), "audio_latent"_a.noconvert(), "context"_a.noconvert(),
      "sigma"_a, "video_out"_a.noconvert(), "audio_out"_a.noconvert(), nb::kw_only(),
      "cond_latent"_a.noconvert() = nb::none(), "text_token_tags"_a = std::vector<uint8_t>{},
      "audio_scale"_a = 4.0, "seed"_a = 0, "visual_cond_noise_aug"_a = 0.999, "mode"_a = "streamed",
      "options"_a = nb::none());
  c.def("ledger", [](const PyEngine& e) { return ledger_list(*e.engine); });
  c.def("reset_ledger", [](PyEngine& e) { e.engine->reset_ledger(); });
  c.def("arena_peak", [](const PyEngine& e) { return e.engine->arena_peak(); });
  c.def("arena_allocated", [](const PyEngine& e) { return e.engine->arena_allocated(); });
}

}  // namespace h3s::py
