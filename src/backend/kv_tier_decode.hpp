// A K/V tier's attention by its decode path, over any backend's ops: blocks
// of keys decoded to the bf16 K~/V~ the tier's definition gives, each
// attended by the exact attention() with the state carried. The CUDA backend
// runs kvfp4s this way where its Hopper kernel does not (H3S_KVFP4S_KERNEL=
// decode); on the CPU it equals the tier's own attention bit for bit (the
// definition decodes a tile, then runs the exact tile arithmetic), which is
// how CI tests this loop.
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

}  // namespace h3s
