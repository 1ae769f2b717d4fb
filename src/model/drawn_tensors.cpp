// Drawn checkpoint tensors (drawn_tensors.hpp).
#include "model/drawn_tensors.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"
#include "model/checkpoint_tensors.hpp"
#include "model/packed_layout.hpp"
#include "model/safetensors.hpp"

namespace h3s {

namespace {

// FNV-1a of a key: the tensor's stream does not depend on which other
// tensors the file holds (--blocks), only on its name.
uint64_t name_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= uint8_t(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// The DiT block a key belongs to ("blocks.<n>.", not the token refiner's).
int64_t dit_block_of(std::string_view name) {
  constexpr std::string_view kPrefix = "blocks.";
  if (!name.starts_with(kPrefix)) return -1;
  int64_t b = -1;
  const char* first = name.data() + kPrefix.size();
  std::from_chars(first, name.data() + name.size(), b);
  return b;
}

// How ModelWeights::random stores each role: the block linears in the
// model's format, plain layers (condition_proj, full-form adaLN) in bf16,
// fp32 islands in f32.
WeightFormat stored_format(LinearRole role, WeightFormat format) {
  switch (role) {
    case LinearRole::block:
      return format;
    case LinearRole::plain:
      return WeightFormat::bf16;
    case LinearRole::island:
      return WeightFormat::f32;
  }
  return format;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A sum of four 16-bit uniforms, centred and scaled to unit variance: a
// normal-ish value within +-sqrt(12), from one 64-bit draw.
inline float unit_value(uint64_t r) {
  const uint32_t s = uint32_t(r & 0xffff) + uint32_t((r >> 16) & 0xffff) +
                     uint32_t((r >> 32) & 0xffff) + uint32_t(r >> 48);
  // (s + 2) / 65536 is the sum of the four uniforms on (0, 1), mean 2, variance 1/3.
  return (float(s + 2) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

// 0..n-1 from 16 random bits (multiply-shift: each value from 65536/n inputs, +-1).
inline uint32_t below16(uint64_t bits16, uint32_t n) {
  return uint32_t(((bits16 & 0xffff) * n) >> 16);
}

// Inverse of nvfp4_scale_offset: the (row, block) a swizzled scale byte holds.
void fp4_scale_position(int64_t offset, int64_t cols, int64_t* row, int64_t* block) {
  const int64_t tile = offset / 512, within = offset % 512;
  *row = (tile / (cols / 4)) * 128 + ((within % 16) / 4) * 32 + within / 16;
  *block = (tile % (cols / 4)) * 4 + within % 4;
}

}  // namespace

std::vector<DrawnTensor> drawn_tensors(const ModelConfig& cfg, WeightFormat format, uint64_t seed) {
  cfg.validate();
  if (format == WeightFormat::f32)
    fail(ErrorKind::invalid_argument, "weight format f32 is only for fp32 islands; use bf16");
  // A model with no arrays: the key walk only needs its config and sizes.
  ModelWeights skeleton;
  skeleton.config = cfg;
  skeleton.format = format;
  skeleton.refiner.resize(size_t(cfg.refiner_blocks));
  skeleton.blocks.resize(size_t(cfg.blocks));
  const WeightSlots slots = weight_slots(skeleton);
  const bool island_bf16 = format != WeightFormat::bf16;

  std::vector<DrawnTensor> out;
  auto add = [&](std::string name, std::string dtype, std::vector<int64_t> shape,
                 DrawKind kind) -> DrawnTensor& {
    DrawnTensor& t = out.emplace_back();
    t.kind = kind;
    t.stream = mix_seed(seed, name_hash(name));
    t.block = dit_block_of(name);
    const size_t elem = *safetensors_dtype_size(dtype);
    t.byte_size = elem;
    for (int64_t d : shape) t.byte_size *= size_t(d);
    t.decl = {std::move(name), std::move(dtype), std::move(shape), std::nullopt};
    return t;
  };

  for (const LinearSlot& s : slots.linears) {
    // Small modulation (ModelWeights::random's adaLN gain and bias spread) so
    // activations stay in a realistic range through every block.
    const bool adaln = s.name.ends_with("adaln_proj.linear");
    const float spread = (adaln ? 0.3f : 1.0f) / std::sqrt(float(s.in));
    LinearStorage st;
    st.format = stored_format(s.role, format);
    st.bias_bf16 = s.role != LinearRole::island;
    for (LinearTensor& lt : linear_tensors(s, st)) {
      const LinearPart part = lt.part;
      DrawnTensor& t =
          add(std::move(lt.name), std::move(lt.dtype), std::move(lt.shape), DrawKind::literal);
      switch (part) {
        case LinearPart::weight:
          if (st.format == WeightFormat::bf16 || st.format == WeightFormat::f32) {
            t.kind = st.format == WeightFormat::bf16 ? DrawKind::normal_bf16 : DrawKind::normal_f32;
            t.stddev = spread;
            t.round_bf16 = island_bf16;  // ComfyUI holds a quantised file's islands in bf16
          } else if (st.format == WeightFormat::int8) {
            t.kind = DrawKind::int8_codes;
          } else if (st.format == WeightFormat::w4a8) {
            t.kind = DrawKind::w4_codes;
          } else {
            t.kind = DrawKind::fp4_codes;
            t.rows = s.out;
            t.cols = s.in;
          }
          break;
        case LinearPart::scale:  // int8: w = code x scale
          t.kind = DrawKind::fill_f32;
          t.value = float(spread / kDrawnInt8CodeStd);
          break;
        case LinearPart::s_rel:
          t.kind = DrawKind::fill_u8;
          t.code = f32_to_e4m3(kDrawnW4SRel);
          break;
        case LinearPart::s_channel:  // w4a8: w = (level x s_rel) x s_channel
          t.kind = DrawKind::fill_f32;
          t.value = float(spread / (kDrawnW4LevelStd * kDrawnW4SRel));
          break;
        case LinearPart::codebook:  // never drawn (linear_tensors lists it only when asked)
          fail(ErrorKind::internal, "drawn_tensors: no codebook is drawn");
        case LinearPart::block_scale:
          t.kind = DrawKind::fp4_block_scales;
          t.code = f32_to_e4m3(kDrawnFp4BlockScale);
          t.rows = s.out;
          t.cols = s.in;
          break;
        case LinearPart::global:  // nvfp4: w = e2m1 x (block scale x global)
          t.kind = DrawKind::fill_f32;
          t.value = float(spread / (kDrawnE2m1Std * kDrawnFp4BlockScale));
          break;
        case LinearPart::comfy_quant: {
          const std::string json = comfy_quant_json(st.format);
          t.bytes = bytes_of(std::vector<char>(json.begin(), json.end()));
          break;
        }
        case LinearPart::bias:  // bf16 values whatever the dtype, as the seeded biases
          t.kind = st.bias_bf16 ? DrawKind::normal_bf16 : DrawKind::normal_f32;
          t.stddev = adaln ? 0.05f : 0.02f;
          t.round_bf16 = true;
          break;
      }
    }
  }
  for (const VectorSlot& s : slots.norms) {
    DrawnTensor& t = add(s.name, "BF16", {s.size}, DrawKind::normal_bf16);
    t.mean = 1.0f;
    t.stddev = 0.1f;
  }
  for (const F32Slot& s : slots.buffers) {
    DrawnTensor& t = add(s.name, "F32", s.shape, DrawKind::normal_f32);
    if (s.v == &skeleton.rope_inv_freq) {
      t.kind = DrawKind::literal;
      t.bytes = bytes_of(default_inv_freq(cfg.rope_freqs));
    } else {  // adaln_t_table: unit normal values, as the seeded table
      t.stddev = 1.0f;
    }
  }
  for (const DrawnTensor& t : out)
    H3S_CHECK(t.kind != DrawKind::literal || t.bytes.size() == t.byte_size);
  return out;
}

void draw_piece(const DrawnTensor& t, size_t begin, std::span<std::byte> out) {
  H3S_CHECK(begin % kDrawPieceBytes == 0 && begin + out.size() <= t.byte_size);
  Rng rng(mix_seed(t.stream, begin / kDrawPieceBytes));
  std::byte* o = out.data();
  const size_t n = out.size();
  switch (t.kind) {
    case DrawKind::normal_bf16:
      for (size_t i = 0; i + 2 <= n; i += 2) {
        const uint16_t v = f32_to_bf16(t.mean + t.stddev * unit_value(rng.next_u64())).bits;
        std::memcpy(o + i, &v, 2);
      }
      break;
    case DrawKind::normal_f32:
      for (size_t i = 0; i + 4 <= n; i += 4) {
        float v = t.mean + t.stddev * unit_value(rng.next_u64());
        if (t.round_bf16) v = round_bf16(v);
        std::memcpy(o + i, &v, 4);
      }
      break;
    case DrawKind::int8_codes:
      for (size_t i = 0; i < n; i += 4) {
        const uint64_t r = rng.next_u64();
        for (size_t j = 0; j < 4 && i + j < n; ++j)
          o[i + j] = std::byte(uint8_t(int(below16(r >> (16 * j), 255)) - 127));
      }
      break;
    case DrawKind::w4_codes:
      for (size_t i = 0; i < n; i += 2) {
        const uint64_t r = rng.next_u64();
        for (size_t j = 0; j < 2 && i + j < n; ++j) {
          const uint32_t lo = 1 + below16(r >> (32 * j), 15),
                         hi = 1 + below16(r >> (32 * j + 16), 15);
          o[i + j] = std::byte(uint8_t(lo | (hi << 4)));
        }
      }
      break;
    case DrawKind::fp4_codes: {
      const int64_t row_bytes = round_up(t.cols, 16) / 2;
      for (size_t i = 0; i < n; i += 8) {
        const uint64_t r = rng.next_u64();
        for (size_t j = 0; j < 8 && i + j < n; ++j) {
          const int64_t at = int64_t(begin + i + j), row = at / row_bytes;
          const int64_t col = (at % row_bytes) * 2;  // the high nibble's column
          uint8_t b = uint8_t(r >> (8 * j));
          if (row >= t.rows) b = 0;
          if (col >= t.cols) b &= 0x0f;
          if (col + 1 >= t.cols) b &= 0xf0;
          o[i + j] = std::byte(b);
        }
      }
      break;
    }
    case DrawKind::fp4_block_scales: {
      const int64_t blocks = round_up(t.cols, 16) / 16, cols = round_up(blocks, 4);
      for (size_t i = 0; i < n; ++i) {
        int64_t row = 0, block = 0;
        fp4_scale_position(int64_t(begin + i), cols, &row, &block);
        o[i] = std::byte(row < t.rows && block < blocks ? t.code : uint8_t(0));
      }
      break;
    }
    case DrawKind::fill_f32:
      for (size_t i = 0; i + 4 <= n; i += 4) std::memcpy(o + i, &t.value, 4);
      break;
    case DrawKind::fill_u8:
      std::memset(o, t.code, n);
      break;
    case DrawKind::literal:
      std::memcpy(o, t.bytes.data() + begin, n);
      break;
  }
}

}  // namespace h3s
