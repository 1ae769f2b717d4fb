// `h3s kvbench`'s baselines on the host: each tier's recipe without the
// step it adds (kvbench_cmd.cpp's header lists them), and kvfp4s' recipe
// by the definition of record with or without its K mean.
#pragma once

#include "core/thread_pool.hpp"
#include "h3s/kv_tier.hpp"
#include "kvbench_inputs.hpp"

namespace h3s::cli::kvbench {

// kvi8r's or kvi8s' recipe without the Hadamard basis.
Rows baseline_attention(KvTier tier, const Inputs& in, ThreadPool& pool);
// kvfp4s: K rotated and centred (the tier) or not (its baseline).
Rows fp4s_attention(const Inputs& in, bool centred, ThreadPool& pool);

}  // namespace h3s::cli::kvbench
