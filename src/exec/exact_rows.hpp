// exact_av_rows (docs/FEATURES.md "Controls"): beside an approximate K/V store, the text and
// audio query rows attend the exact bf16 K/V. Attention is row-invariant, so
// those rows' outputs are the exact store's bit for bit, whatever the chunk
// they sit in: audio is ~1% of the rows and audibly sensitive to the cheap
// stores' error. Both executors attend these rows first (before a store
// rotates its queries in place) and paste them over the store's output.
#pragma once

#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "h3s/options.hpp"
#include "model/packed_layout.hpp"

namespace h3s {

// The rows exact_av_rows routes to the exact K/V for `layout` (its text and
// audio segments, sorted); empty unless o.exact_av_rows and o.kv_store is an
// approximate tier.
std::vector<RowRange> exact_query_rows(const ExecOptions& o, const PackedLayout& layout);
// The same from a block call's mod runs (ComfyUI's mod_segments, absolute):
// the rows whose adaLN row is a text or audio one (mod_row % 3: kTagText,
// kTagAudio), adjacent runs merged. What a single-block call knows of the
// layout (the ComfyUI node, the Python and C++ run_block).
std::vector<RowRange> exact_query_rows(const ExecOptions& o, std::span<const ModRun> runs);

// One run of exact rows inside a query chunk: rows relative to the chunk,
// and their attention output.
struct ExactRowsOut {
  RowRange rows;
  OwnedTensor out;
};

// Attends the rows of query chunk `chunk` (queries q, not yet rotated) that
// fall in `exact_rows` over `kv`, in kv_block-key blocks from key 0 (0: one
// pass), as the exact store does.
std::vector<ExactRowsOut> attend_exact_rows(Backend& backend, Arena& arena, const Tensor& q,
                                            RowRange chunk, std::span<const RowRange> exact_rows,
                                            const KvView& kv, int64_t kv_block, int64_t heads,
                                            int64_t head_dim);
// Copies them over the chunk's attention output `out`.
void paste_exact_rows(Backend& backend, std::span<const ExactRowsOut> rows, const Tensor& out);

// Device bytes of what exact_av_rows adds to the K/V phase and attention:
// the retained bf16 K/V beside the approximate store.
size_t exact_rows_store_bytes(const ExecOptions& o, int64_t seq, int64_t heads, int64_t head_dim);

}  // namespace h3s
