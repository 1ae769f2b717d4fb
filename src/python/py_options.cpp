// Options: every control of docs/FEATURES.md "Controls" (ExecOptions), validated whenever it
// is built or changed, so a bad value fails where it is set, naming the
// control, the value and the range.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

#include "core/error.hpp"
#include "h3s/options.hpp"
#include "python/bindings.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// A head list is a set: kept sorted, so the same heads in any order give
// equal options and the same repr, whether set at construction or later.
void normalise(ExecOptions& o) {
  std::sort(o.kv_mix_heads.begin(), o.kv_mix_heads.end());
}

// A property whose setter validates the whole set before keeping the value.
template <class T>
void field(nb::class_<ExecOptions>& c, const char* name, T ExecOptions::*member, const char* doc) {
  c.def_prop_rw(
      name, [member](const ExecOptions& o) { return o.*member; },
      [member](ExecOptions& o, T v) {
        ExecOptions changed = o;
        changed.*member = std::move(v);
        normalise(changed);
        changed.validate();
        o = std::move(changed);
      },
      doc);
}

// A byte count (held unsigned): a negative value is refused by name, where
// the unsigned argument would raise nanobind's unnamed TypeError.
uint64_t checked_bytes(const char* name, int64_t v) {
  if (v < 0)
    fail(ErrorKind::invalid_argument, "{} = {} is out of range: it must be >= 0 bytes (0: {})",
         name, v, std::string_view(name) == "vram_budget" ? "no limit" : "the memory available");
  return uint64_t(v);
}
void bytes_field(nb::class_<ExecOptions>& c, const char* name, uint64_t ExecOptions::*member,
                 const char* doc) {
  c.def_prop_rw(
      name, [member](const ExecOptions& o) { return o.*member; },
      [member, name](ExecOptions& o, int64_t v) {
        ExecOptions changed = o;
        changed.*member = checked_bytes(name, v);
        changed.validate();
        o = std::move(changed);
      },
      doc);
}

// The same for a control held as an enum and set by name (parse() refuses
// an unknown name; the whole set is then validated, e.g. kv_placement host
// against an approximate kv_store).
template <class T>
void named_field(nb::class_<ExecOptions>& c, const char* name, T ExecOptions::*member,
                 std::string_view (*to_name)(T), T (*parse)(std::string_view), const char* doc) {
  c.def_prop_rw(
      name, [member, to_name](const ExecOptions& o) { return std::string(to_name(o.*member)); },
      [member, parse](ExecOptions& o, const std::string& v) {
        ExecOptions changed = o;
        changed.*member = parse(v);
        changed.validate();
        o = std::move(changed);
      },
      doc);
}

std::string repr(const ExecOptions& o) {
  return fmt::format(
      "Options(q_chunk={}, kv_chunk={}, mlp_chunk={}, min_tokens={}, kv_block={}, "
      "final_layer_chunk={}, final_layer_gemm='{}', kv_store='{}', kv_mix_heads=[{}], "
      "kv_mix_count={}, exact_av_rows={}, "
      "trim_forward={}, self_check={}, merge_tail_below={}, kv_placement='{}', host_budget={}, "
      "vram_budget={})",
      o.q_chunk, o.kv_chunk, o.mlp_chunk, o.min_tokens, o.kv_block, o.final_layer_chunk,
      final_gemm_name(o.final_layer_gemm), kv_tier_name(o.kv_store),
      fmt::join(o.kv_mix_heads, ", "), o.kv_mix_count, o.exact_av_rows ? "True" : "False",
      o.trim_forward ? "True" : "False", o.self_check ? "True" : "False", o.merge_tail_below,
      kv_placement_name(o.kv_placement), o.host_budget, o.vram_budget);
}

nb::dict to_dict(const ExecOptions& o) {
  nb::dict d;
  d["q_chunk"] = o.q_chunk;
  d["kv_chunk"] = o.kv_chunk;
  d["mlp_chunk"] = o.mlp_chunk;
  d["min_tokens"] = o.min_tokens;
  d["kv_block"] = o.kv_block;
  d["final_layer_chunk"] = o.final_layer_chunk;
  d["final_layer_gemm"] = std::string(final_gemm_name(o.final_layer_gemm));
  d["kv_store"] = std::string(kv_tier_name(o.kv_store));
  d["kv_mix_heads"] = o.kv_mix_heads;
  d["kv_mix_count"] = o.kv_mix_count;
  d["exact_av_rows"] = o.exact_av_rows;
  d["trim_forward"] = o.trim_forward;
  d["self_check"] = o.self_check;
  d["merge_tail_below"] = o.merge_tail_below;
  d["kv_placement"] = std::string(kv_placement_name(o.kv_placement));
  d["host_budget"] = o.host_budget;
  d["vram_budget"] = o.vram_budget;
  return d;
}

}  // namespace

void bind_options(nb::module_& m) {
  const ExecOptions d;  // the reference node's defaults
  nb::class_<ExecOptions> c(
      m, "Options",
      "Every control of the 'H3 Streamed Blocks' node (docs/FEATURES.md, Controls). Bad "
      "values raise ValueError naming the control.");
  c.def(
      "__init__",
      [](ExecOptions* self, int64_t q_chunk, int64_t kv_chunk, int64_t mlp_chunk,
         int64_t min_tokens, int64_t kv_block, int64_t final_layer_chunk,
         const std::string& final_layer_gemm, const std::string& kv_store,
         const std::vector<int>& kv_mix_heads, int64_t kv_mix_count, bool exact_av_rows,
         bool trim_forward, bool self_check, int64_t merge_tail_below,
         const std::string& kv_placement, int64_t host_budget, int64_t vram_budget) {
        ExecOptions o;
        o.q_chunk = q_chunk;
        o.kv_chunk = kv_chunk;
        o.mlp_chunk = mlp_chunk;
        o.min_tokens = min_tokens;
        o.kv_block = kv_block;
        o.final_layer_chunk = final_layer_chunk;
        o.final_layer_gemm = parse_final_gemm(final_layer_gemm);
        o.kv_store = parse_kv_tier(kv_store);
        o.kv_mix_heads = kv_mix_heads;
        o.kv_mix_count = kv_mix_count;
        o.exact_av_rows = exact_av_rows;
        o.trim_forward = trim_forward;
        o.self_check = self_check;
        o.merge_tail_below = merge_tail_below;
        o.kv_placement = parse_kv_placement(kv_placement);
        o.host_budget = checked_bytes("host_budget", host_budget);
        o.vram_budget = checked_bytes("vram_budget", vram_budget);
        normalise(o);
        o.validate();  // before construction: a bad value leaves no half-built object
        new (self) ExecOptions(std::move(o));
      },
      nb::kw_only(), "q_chunk"_a = d.q_chunk, "kv_chunk"_a = d.kv_chunk,
      "mlp_chunk"_a = d.mlp_chunk, "min_tokens"_a = d.min_tokens, "kv_block"_a = d.kv_block,
      "final_layer_chunk"_a = d.final_layer_chunk,
      "final_layer_gemm"_a = std::string(final_gemm_name(d.final_layer_gemm)),
      "kv_store"_a = std::string(kv_tier_name(d.kv_store)), "kv_mix_heads"_a = d.kv_mix_heads,
      "kv_mix_count"_a = d.kv_mix_count, "exact_av_rows"_a = d.exact_av_rows,
      "trim_forward"_a = d.trim_forward, "self_check"_a = d.self_check,
      "merge_tail_below"_a = d.merge_tail_below,
      "kv_placement"_a = std::string(kv_placement_name(d.kv_placement)),
      "host_budget"_a = int64_t(d.host_budget), "vram_budget"_a = int64_t(d.vram_budget));
  c.def_static("stock", &ExecOptions::stock,
               "The stock path's options (whole sequence everywhere, ComfyUI-like).");
  field(c, "q_chunk", &ExecOptions::q_chunk, "query rows per attention call (>= 1)");
  field(c, "kv_chunk", &ExecOptions::kv_chunk, "rows per projection chunk building K/V (>= 1)");
  field(c, "mlp_chunk", &ExecOptions::mlp_chunk,
        "rows per MLP chunk (>= 0); 0 = the MLP over the whole sequence in one chunk");
  field(c, "min_tokens", &ExecOptions::min_tokens,
        "below this packed length run_block runs stock, the same bits (>= 0)");
  field(c, "kv_block", &ExecOptions::kv_block,
        "K/V rows per attention pass (0 or a multiple of the 128-key tile); with host-staged "
        "K/V the staging tile (0: the planner's)");
  field(c, "final_layer_chunk", &ExecOptions::final_layer_chunk,
        "rows per output-head chunk (>= 0; the full forward only)");
  named_field(
      c, "kv_store", &ExecOptions::kv_store, kv_tier_name, parse_kv_tier,
      "K/V storage tier: 'bf16' (exact), 'kvi8r', 'kvi8s', 'kvfp4s' or 'kvmix' (approximate; "
      "on CUDA all four run on Hopper, kvi8r and kvfp4s on every GPU through their decode "
      "paths; kvi8s and kvmix elsewhere run 'bf16' and say so)");
  field(c, "kv_mix_heads", &ExecOptions::kv_mix_heads,
        "kv_store 'kvmix': the heads kept on 8 bits (kvi8s), the rest on 4 (kvfp4s), the same "
        "for every block; [] (default): calibrated per block on its first call "
        "(Engine.kv_mix_heads shows the choice)");
  field(c, "kv_mix_count", &ExecOptions::kv_mix_count,
        "kv_store 'kvmix' without kv_mix_heads: how many heads the calibration keeps on 8 bits "
        "(>= 0; 0: half, 28 of H3's 56)");
  field(c, "exact_av_rows", &ExecOptions::exact_av_rows,
        "with an approximate kv_store: text and audio query rows attend a retained exact bf16 "
        "K/V (their attention rows are the exact store's bit for bit; the full forward takes "
        "the rows from its layout, run_block from the call's mod runs)");
  field(c, "trim_forward", &ExecOptions::trim_forward,
        "release embed buffers once packed (the full forward only)");
  field(c, "self_check", &ExecOptions::self_check,
        "run_block first compares stock and streamed on copies and keeps the line "
        "(Engine.last_self_check)");
  field(c, "merge_tail_below", &ExecOptions::merge_tail_below,
        "kv/mlp tail chunks shorter than this merge into the previous one (>= 0)");
  named_field(c, "final_layer_gemm", &ExecOptions::final_layer_gemm, &final_gemm_name,
              &parse_final_gemm, "'exact' or 'streamed' (the full forward only)");
  bytes_field(c, "vram_budget", &ExecOptions::vram_budget,
              "device bytes: Engine.forward's weights plus activations (0: no limit); run_block's "
              "own memory per call (K/V store, chunk buffers; 0: the free device memory at the "
              "call, less a tenth). Host-staged K/V when the store does not fit");
  bytes_field(c, "host_budget", &ExecOptions::host_budget,
              "host bytes staging may pin (0: the memory available at the call, less a tenth)");
  named_field(c, "kv_placement", &ExecOptions::kv_placement, &kv_placement_name,
              &parse_kv_placement,
              "where the K/V store lives: 'auto' (the device unless the budget needs it staged), "
              "'device', or 'host' (pinned host memory, streamed back in kv_block tiles); exact "
              "everywhere");
  c.def("to_dict", &to_dict, "The controls as a dict (the keyword arguments of Options).");
  c.def("__repr__", &repr);
  c.def("__eq__", [](const ExecOptions& a, const ExecOptions& b) { return repr(a) == repr(b); });
  c.def("__copy__", [](const ExecOptions& o) { return o; });
  c.def(
      "__deepcopy__", [](const ExecOptions& o, nb::handle) { return o; }, "memo"_a);
}

}  // namespace h3s::py
