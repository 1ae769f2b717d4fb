// Checks of numeric flags with the project's messages ("--tokens: 0 is out of
// range: it must be >= 1"), where CLI11's PositiveNumber and
// NonNegativeNumber print their double range ("Value 0 not in range 0.000000
// to 1797693...") for a count, and the same for a word.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/thread_pool.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s::cli {

// A whole number >= min; --help shows it as POSITIVE (min 1) or NONNEGATIVE
// (min 0), as CLI11's own checks did.
inline CLI::Validator whole_at_least(int64_t min) {
  const std::string desc =
      min == 1 ? "POSITIVE" : (min == 0 ? "NONNEGATIVE" : ">=" + std::to_string(min));
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(s, v))
          return "'" + s + "' is not a whole number (it must be >= " + std::to_string(min) + ")";
        if (v < min) return s + " is out of range: it must be >= " + std::to_string(min);
        return {};
      },
      desc);
}

// --threads: 0 (every hardware thread) up to what a worker pool takes.
inline CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::string low = whole_at_least(0)(s);
        if (!low.empty()) return low;
        const int most = ThreadPool::max_threads();
        if (std::stoll(s) > most)
          return s + " is more than this host can use: give at most " + std::to_string(most) +
                 " (" + std::to_string(ThreadPool::hardware_threads()) +
                 " hardware threads; 0: all of them)";
        return {};
      },
      "NONNEGATIVE");
}

// A K/V tier flag (bound to a KvTier; give it type_name("TEXT") and a
// default_str): the tier table's names (the approximate ones alone with
// approximate_only), each handed on as its tier; another word is refused as
// CLI11's IsMember words it ("--kv-store: kvi4 not in {bf16,kvi8r,...}").
inline CLI::Validator kv_tier_names(bool approximate_only = false) {
  std::string set;
  for (const KvTierRow& r : kv_tier_rows())
    if (!approximate_only || !r.exact) set += (set.empty() ? "" : ",") + std::string(r.name);
  set = "{" + set + "}";
  return CLI::Validator(
      [approximate_only, set](std::string& s) -> std::string {
        for (const KvTierRow& r : kv_tier_rows())
          if ((!approximate_only || !r.exact) && r.name == s) {
            s = std::to_string(int(r.tier));  // CLI11 reads an enum as its number
            return {};
          }
        return s + " not in " + set;
      },
      set);
}

}  // namespace h3s::cli
