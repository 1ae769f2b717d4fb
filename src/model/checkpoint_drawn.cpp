// Streaming a drawn checkpoint to disk (checkpoint_drawn.hpp).
#include "model/checkpoint_drawn.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "model/drawn_tensors.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_stream.hpp"

namespace h3s {

namespace {

// One piece of one tensor, placed in the data section.
struct Piece {
  const DrawnTensor* tensor;
  size_t begin;  // within the tensor
  size_t bytes;
  size_t offset;  // within the data section
};

// The data section's pieces in file order.
std::vector<Piece> pieces_in_order(const SafetensorsLayout& layout,
                                   const std::vector<DrawnTensor>& tensors) {
  std::unordered_map<std::string_view, const DrawnTensor*> by_name;
  for (const DrawnTensor& t : tensors) by_name.emplace(t.decl.name, &t);
  std::vector<Piece> pieces;
  for (const SafetensorsLayout::Placed& p : layout.tensors) {
    const DrawnTensor* t = by_name.at(p.decl.name);
    H3S_CHECK(t->byte_size == p.bytes);
    for (size_t b = 0; b < p.bytes; b += kDrawPieceBytes)
      pieces.push_back({t, b, std::min(kDrawPieceBytes, p.bytes - b), p.offset + b});
  }
  return pieces;
}

// Progress through the data order. The data section holds the tensors by
// element size (largest first), then by name, so every DiT block is written
// in one run per element size (a "section": its fp32 scales, its bf16
// weights, its 1-byte codes): a milestone is the end of one block's run.
class BlockMilestones {
 public:
  struct Milestone {
    size_t end = 0;          // data bytes written when it is reached
    size_t section = 0;      // index into labels()
    int64_t in_section = 0;  // blocks whose run in the section is written
    int64_t complete = 0;    // blocks whose tensors are all written
  };

  BlockMilestones(const SafetensorsLayout& layout, const std::vector<DrawnTensor>& tensors,
                  int64_t blocks) {
    std::unordered_map<std::string_view, int64_t> block_of;
    for (const DrawnTensor& t : tensors) block_of.emplace(t.decl.name, t.block);
    std::vector<size_t> block_end(size_t(blocks), 0);
    const auto& placed = layout.tensors;
    for (size_t i = 0; i < placed.size();) {
      // One section: the run of tensors of one element size.
      const size_t elem = *safetensors_dtype_size(placed[i].decl.dtype);
      std::vector<size_t> ends(size_t(blocks), 0);
      std::set<std::string> dtypes;
      for (; i < placed.size() && *safetensors_dtype_size(placed[i].decl.dtype) == elem; ++i) {
        const int64_t b = block_of.at(placed[i].decl.name);
        if (b < 0 || b >= blocks) continue;
        ends[size_t(b)] = placed[i].offset + placed[i].bytes;  // offsets ascend
        dtypes.insert(placed[i].decl.dtype);
        block_end[size_t(b)] = ends[size_t(b)];
      }
      if (dtypes.empty()) continue;
      std::string label;
      for (const std::string& d : dtypes) label += (label.empty() ? "" : "/") + d;
      std::sort(ends.begin(), ends.end());
      for (size_t k = 0; k < ends.size(); ++k)
        if (ends[k] > 0) milestones_.push_back({ends[k], labels_.size(), int64_t(k + 1), 0});
      labels_.push_back(label);
    }
    std::sort(block_end.begin(), block_end.end());
    for (Milestone& m : milestones_)
      m.complete =
          int64_t(std::upper_bound(block_end.begin(), block_end.end(), m.end) - block_end.begin());
  }

  // The last milestone reached with `done` data bytes written, or null.
  const Milestone* reached(size_t done) const {
    const auto it = std::upper_bound(milestones_.begin(), milestones_.end(), done,
                                     [](size_t d, const Milestone& m) { return d < m.end; });
    return it == milestones_.begin() ? nullptr : &*(it - 1);
  }
  const std::string& label(size_t section) const { return labels_[section]; }

 private:
  std::vector<Milestone> milestones_;  // ascending
  std::vector<std::string> labels_;    // a section's block dtypes, e.g. "I8/U8"
};

}  // namespace

void write_drawn_checkpoint(const std::string& path, const ModelConfig& cfg, WeightFormat format,
                            uint64_t seed, const std::map<std::string, std::string>& metadata,
                            const DrawnCheckpointOptions& options) {
  const std::vector<DrawnTensor> tensors = drawn_tensors(cfg, format, seed);
  ThreadPool pool(options.threads);  // a bad count fails before any file exists
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const DrawnTensor& t : tensors) decls.push_back(t.decl);
  std::map<std::string, std::string> md = metadata;
  md.emplace("format", "pt");

  SafetensorsStreamWriter out(path, decls, md);
  const SafetensorsLayout& layout = out.layout();
  const std::vector<Piece> pieces = pieces_in_order(layout, tensors);
  const BlockMilestones milestones(layout, tensors, cfg.blocks);
  DrawnProgress progress;
  progress.blocks = cfg.blocks;
  progress.bytes = layout.file_bytes();
  const BlockMilestones::Milestone* shown = nullptr;
  // Each time a milestone is passed, and at the end.
  const auto report = [&](bool last) {
    const BlockMilestones::Milestone* m = milestones.reached(out.data_written());
    if (!options.on_progress || (m == shown && !last)) return;
    shown = m;
    progress.tensors = last ? std::string() : milestones.label(m->section);
    progress.section_blocks_done = last ? cfg.blocks : m->in_section;
    progress.blocks_done = last ? cfg.blocks : m->complete;
    progress.bytes_done = layout.head.size() + out.data_written();
    options.on_progress(progress);
  };

  // Two batch buffers: one drawn into while the other is written.
  const size_t capacity = std::max(options.batch_bytes, kDrawPieceBytes);
  std::unique_ptr<std::byte[]> buffers[2] = {std::make_unique_for_overwrite<std::byte[]>(capacity),
                                             std::make_unique_for_overwrite<std::byte[]>(capacity)};
  std::future<void> writing;  // destroyed first: waits for the write in flight
  size_t next = 0;
  for (int k = 0; next < pieces.size(); k ^= 1) {
    // The batch: whole pieces, at least one, at most `capacity` bytes.
    const size_t first = next, base = pieces[first].offset;
    while (next < pieces.size() && pieces[next].offset + pieces[next].bytes - base <= capacity)
      ++next;
    const size_t last = next;
    std::byte* buf = buffers[k].get();
    std::atomic<size_t> claim{first};
    pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t) {
      for (size_t i = claim++; i < last; i = claim++) {
        const Piece& p = pieces[i];
        draw_piece(*p.tensor, p.begin, {buf + (p.offset - base), p.bytes});
      }
    });
    if (writing.valid()) {
      writing.get();
      report(false);
    }
    writing = std::async(std::launch::async, [&out, &pieces, buf, first, last, base] {
      // One write per tensor's run of pieces in the batch.
      for (size_t i = first; i < last;) {
        size_t j = i + 1;
        while (j < last && pieces[j].tensor == pieces[i].tensor) ++j;
        const size_t begin = pieces[i].offset - base;
        const size_t end = pieces[j - 1].offset + pieces[j - 1].bytes - base;
        out.write(pieces[i].tensor->decl.name, {buf + begin, end - begin});
        i = j;
      }
    });
  }
  if (writing.valid()) writing.get();
  out.finish();
  report(true);
}

}  // namespace h3s
