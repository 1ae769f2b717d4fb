// K/V tiers' attention by their decode paths, over any backend's ops: blocks
// of keys decoded to the 16-bit K~/V~ the tier's definition gives (kvfp4s:
// bf16, kvi8r: fp16), each attended by the exact attention() with the state
// carried. The CUDA backend runs kvfp4s this way on every GPU and kvi8r off
// Hopper (backend/cuda/kernel_choice.hpp; on Hopper too for attn_kernel
// sm80); on the CPU each equals the tier's own attention bit for bit (the
// definitions decode a tile, then run the exact tile arithmetic), which is
// how CI tests the loop.
#pragma once

#include <cstdint>

#include "backend/backend.hpp"

namespace h3s {

// kvfp4s' attention of q_rot (rotated) over `keys`: blocks of `block_keys`
// keys (a positive multiple of kAttnKvTile, so every block starts on an
// attention tile and the blocks chain as kv_block does) decoded by
// be.kvfp4s_decode into `scratch` ([min(keys, block_keys), heads, 128] bf16,
// K and V), then be.attention(). keys.begin is on a tile, as for any
// attention call.
void attention_kvfp4s_decoded(Backend& be, Arena& scratch, const Tensor& q_rot,
                              const KvFp4sView& kv, RowRange keys, AttnState& s,
                              int64_t block_keys);

// kvi8r's, the same way: be.kvi8r_decode into fp16 scratch, then
// be.attention() (its fp16 K/V form). The state is the rotated one
// (attn_state_finish_rotated finishes it).
void attention_kvi8r_decoded(Backend& be, Arena& scratch, const Tensor& q_rot, const KvI8View& kv,
                             RowRange keys, AttnState& s, int64_t block_keys);

}  // namespace h3s
