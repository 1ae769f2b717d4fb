// The h3s command line as a user drives it: demo JSON contract, the table,
// and one-line errors with exit code 2 for bad flag values.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cli_run.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8r.hpp"
#include "kv/kv_i8s.hpp"

namespace {

using h3s::cli_test::Result;
using h3s::cli_test::run_cli;

// Chunks well below the 600 tokens (primes, so every phase has a short tail).
TEST(Cli, DemoJsonReportsBitEqualAndLowerStreamedPeak) {
  for (const char* format : {"bf16", "int8", "w4a8", "nvfp4"}) {
    const Result r = run_cli(std::string("demo --json --tokens 600 --threads 2 --q-chunk 97 "
                                         "--kv-chunk 131 --mlp-chunk 61 --format ") +
                                 format,
                             /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("format"), format);
    EXPECT_EQ(j.at("tokens"), 600);
    EXPECT_TRUE(j.at("bit_equal").get<bool>());
    EXPECT_LT(j.at("streamed_peak_bytes").get<size_t>(), j.at("stock_peak_bytes").get<size_t>());
    EXPECT_GT(j.at("stock_seconds").get<double>(), 0.0);
    EXPECT_GT(j.at("streamed_seconds").get<double>(), 0.0);
    EXPECT_EQ(j.at("streamed_blocks"), 2);
  }
}

// The approximate tiers' demo and run arguments: chunks well below the 600
// tokens, primes.
const std::string kTierArgs =
    " --json --tokens 600 --threads 2 --q-chunk 97 --kv-chunk 131 --mlp-chunk 61 --format int8 "
    "--kv-store ";

// Each approximate tier: h3s demo's two runs bit-equal inside the tier, labelled
// approximate with its error against the exact store (small, not zero). One
// test per tier, so ctest runs them side by side (as one test it was the
// suite's longest under ASan, ~330 s, and started last).
class CliTier : public ::testing::TestWithParam<std::string> {};

// The error bounds: 1.5x the values measured with kTierArgs on 2026-12-06, CPU
// backend (the CPU's arithmetic is fixed whatever the thread count, so these
// are the values every run here gets; a tier that got 1.5x worse fails).
struct DemoTierError {
  const char* tier;
  double video, audio;  // measured rel-rms against the exact store
};
constexpr DemoTierError kDemoTierErrors[] = {
    {"kvi8r", 2.69e-3, 2.59e-3},   // measured 2.688e-3 / 2.593e-3 on 2026-12-06, CPU; bound 1.5x
    {"kvi8s", 2.89e-3, 2.59e-3},   // measured 2.888e-3 / 2.594e-3 on 2026-12-06, CPU; bound 1.5x
    {"kvfp4s", 3.58e-3, 3.53e-3},  // measured 3.581e-3 / 3.533e-3 on 2026-12-06, CPU; bound 1.5x
    {"kvmix", 3.29e-3, 3.14e-3},   // measured 3.294e-3 / 3.136e-3 on 2026-12-06, CPU; bound 1.5x
};

TEST_P(CliTier, DemoIsBitEqualWithinTheTierAndLabelledApproximate) {
  const std::string tier = GetParam();
  const Result demo = run_cli("demo" + kTierArgs + tier, /*merge_stderr=*/false);
  ASSERT_EQ(demo.code, 0) << demo.out;
  const nlohmann::json d = nlohmann::json::parse(demo.out);
  EXPECT_TRUE(d.at("bit_equal").get<bool>());
  EXPECT_TRUE(d.at("approximate").get<bool>());
  const DemoTierError* measured = nullptr;
  for (const DemoTierError& m : kDemoTierErrors)
    if (tier == m.tier) measured = &m;
  ASSERT_NE(measured, nullptr) << tier;
  for (const auto& [key, was] : {std::pair<const char*, double>{"video_rel_rms", measured->video},
                                 {"audio_rel_rms", measured->audio}}) {
    const double e = d.at("error_vs_exact").at(key).get<double>();
    EXPECT_GT(e, 0.0) << key;
    EXPECT_LT(e, 1.5 * was) << key << ": measured " << was << " on 2026-12-06";
  }
  if (tier == "kvmix") {  // each block's calibrated heads, the same in both runs
    EXPECT_TRUE(d.at("kv_mix_same_in_both_runs").get<bool>());
    ASSERT_EQ(d.at("kv_mix_heads").size(), size_t(d.at("blocks").get<int>()));
    for (const auto& [block, heads] : d.at("kv_mix_heads").items())
      EXPECT_EQ(heads.size(), 2u) << block;  // half the tiny model's 4 heads
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, CliTier, ::testing::Values("kvi8r", "kvi8s", "kvfp4s", "kvmix"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// h3s run labels every approximate tier and gives other bits than the exact store.
TEST(Cli, RunWithAnApproximateTierIsLabelledAndDiffersFromTheExactStore) {
  const Result exact = run_cli("run" + kTierArgs + "bf16", /*merge_stderr=*/false);
  ASSERT_EQ(exact.code, 0) << exact.out;
  EXPECT_FALSE(nlohmann::json::parse(exact.out).at("approximate").get<bool>());
  for (const std::string tier : {"kvi8r", "kvi8s", "kvfp4s", "kvmix"}) {
    SCOPED_TRACE(tier);
    const Result run = run_cli("run" + kTierArgs + tier, /*merge_stderr=*/false);
    ASSERT_EQ(run.code, 0) << run.out;
    const nlohmann::json r = nlohmann::json::parse(run.out);
    EXPECT_TRUE(r.at("approximate").get<bool>());
    EXPECT_NE(r.at("output_hash"), nlohmann::json::parse(exact.out).at("output_hash"));
  }
}

// --exact-av-rows: the text and audio query rows attend the exact K/V, so the
// audio output moves closer to the exact store's (not onto it: after the
// first block their K/V come from rows the cheap store touched), and the
// demo's streamed run still equals its stock run.
TEST(Cli, ExactAvRowsBringTheAudioCloserToTheExactStore) {
  const std::string args =
      "demo --json --tokens 600 --threads 2 --q-chunk 97 --kv-chunk 131 --mlp-chunk 61 "
      "--format int8 --kv-store kvi8s";
  double audio[2] = {0, 0};
  for (const bool exact_rows : {false, true}) {
    const Result r = run_cli(args + (exact_rows ? " --exact-av-rows" : ""), false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json d = nlohmann::json::parse(r.out);
    EXPECT_TRUE(d.at("bit_equal").get<bool>());
    audio[exact_rows] = d.at("error_vs_exact").at("audio_rel_rms").get<double>();
  }
  EXPECT_GT(audio[0], 0.0);
  // Measured at these sizes (2 blocks, int8, kvi8s): 2.64e-3 without, 1.68e-3 with.
  EXPECT_LT(audio[1], audio[0]) << "without " << audio[0] << ", with " << audio[1];
}

TEST(Cli, DemoTablePrintsEveryColumn) {
  const Result r =
      run_cli("demo --tokens 400 --threads 2 --self-check --cond-frame --vision-pad-rows 9");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"stock", "streamed", "arena peak", "bit-equal: yes", "self_check block 0",
                        "text 72", "cond 16"})
    EXPECT_NE(r.out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.out;
  // The self_check line's verdict, not only its presence: every variant 0 values differ.
  const size_t at = r.out.find("self_check block 0");
  ASSERT_NE(at, std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  for (const char* v : {"full 0 differ", "q_only 0 differ", "kv_only 0 differ", "mlp_only 0 differ",
                        "none 0 differ"})
    EXPECT_NE(line.find(v), std::string::npos) << "missing '" << v << "' in: " << line;
  EXPECT_NE(line.find("bit-equal"), std::string::npos) << line;
  EXPECT_EQ(line.find("DIVERGED"), std::string::npos) << line;
}

TEST(Cli, RunPrintsTheLedger) {
  const Result r = run_cli("run --tokens 300 --threads 2 --min-tokens 0 --q-chunk 64");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"h3s run (streamed)", "phase", "kv", "attn", "mlp", "final"})
    EXPECT_NE(r.out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.out;
}

TEST(Cli, BadValuesGiveOneLineAndExitCode2) {
  const struct {
    const char* args;
    const char* needle;
  } cases[] = {
      {"demo --kv-block 100", "kv_block = 100"},
      {"demo --q-chunk 0", "q_chunk = 0"},
      {"demo --mlp-chunk -1", "mlp_chunk = -1"},
      {"demo --format fp8", "--format"},
      {"demo --preset huge", "--preset"},
      {"demo --tokens 5", "--tokens 5 is too small"},
      {"demo --frames 10 --width 100 --height 64", "--width 100"},
      {"demo --memory-budget 12XB", "--memory-budget"},
      {"demo --vram-budget 3TB", "--vram-budget"},
      {"demo --final-layer-gemm fast", "--final-layer-gemm"},
      {"demo --kv-store kvi4", "--kv-store"},
      {"demo --no-such-flag", "no-such-flag"},
      // Counts name the flag, the value and the bound (not CLI11's double range).
      {"demo --tokens 0", "--tokens: 0 is out of range: it must be >= 1"},
      {"demo --tokens 1.5", "--tokens: '1.5' is not a whole number"},
      {"demo --threads -3", "--threads: -3 is out of range: it must be >= 0"},
      {"demo --blocks 0", "--blocks: 0 is out of range: it must be >= 1"},
      {"demo --text-len -7", "--text-len: -7 is out of range"},
      {"demo --frames 3", "--frames: 3 is out of range: it must be >= 5"},
      {"demo --kv-mix-count -1", "--kv-mix-count: -1 is out of range"},
      {"bench --reps 0", "--reps: 0 is out of range"},
      {"kvbench --kv-store kvi8s --heads 0", "--heads: 0 is out of range"},
  };
  for (const auto& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.needle), std::string::npos) << c.args << "\n" << r.out;
    // One line: the message and its newline, nothing else.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.args << "\n" << r.out;
  }
}

// --vram-budget: the same forward with resident and with streamed weights (the
// CPU plans and copies like a device) gives the same output bits; too small a
// budget is refused with the minimum.
TEST(Cli, VramBudgetStreamsWeightsAndKeepsTheBits) {
  const std::string base = "run --json --tokens 600 --threads 2 --min-tokens 0 --q-chunk 97 ";
  auto run = [&](const std::string& budget) {
    const Result r = run_cli(base + "--vram-budget " + budget, /*merge_stderr=*/false);
    EXPECT_EQ(r.code, 0) << budget << "\n" << r.out;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json resident = run("0"), roomy = run("1GiB"), tight = run("20MiB");
  EXPECT_EQ(resident.at("weights_residency"), "resident");
  EXPECT_EQ(roomy.at("weights_residency"), "resident");
  EXPECT_EQ(tight.at("weights_residency"), "streamed");
  EXPECT_EQ(tight.at("prefetch"), 0);
  EXPECT_LE(tight.at("peak_bytes").get<size_t>() + tight.at("weights_peak_bytes").get<size_t>(),
            size_t(20) << 20);
  EXPECT_EQ(tight.at("output_hash"), resident.at("output_hash"));
  EXPECT_EQ(roomy.at("output_hash"), resident.at("output_hash"));
  const Result bad = run_cli(base + "--vram-budget 8MiB");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--vram-budget 8.00 MiB cannot hold this forward"), std::string::npos)
      << bad.out;
}

// h3s plan answers "will it fit" for a full-size shape without building weights:
// the K/V stay on the device without a budget, go to host memory under 8 GiB,
// x joins them under 2 GiB, and 1 GiB is refused naming the smallest placement.
TEST(Cli, PlanPlacesFullSizeShapesWithoutWork) {
  auto plan = [](const std::string& budget) {
    const Result r = run_cli("plan --json --tokens 217088 --vram-budget " + budget,
                             /*merge_stderr=*/false);
    EXPECT_EQ(r.code, 0) << budget << "\n" << r.out;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json free = plan("0"), tight = plan("8GiB"), tighter = plan("4GiB");
  EXPECT_EQ(free.at("kv"), "device");
  EXPECT_EQ(tight.at("kv"), "host-staged");
  EXPECT_LE(tight.at("predicted_peak_bytes").get<size_t>(), size_t(8) << 30);
  EXPECT_LE(tighter.at("predicted_peak_bytes").get<size_t>(), size_t(4) << 30);
  // fewer query chunks per pass under the tighter budget: more K/V traffic
  EXPECT_GT(tighter.at("kv_to_device_bytes_per_block").get<size_t>(),
            tight.at("kv_to_device_bytes_per_block").get<size_t>());
  EXPECT_EQ(tight.at("host_bytes").get<size_t>(), size_t(217088) * 7168 * 4);
  // 2 GiB: below x (2.17 GiB) itself, so x is staged too
  const nlohmann::json two = plan("2GiB");
  EXPECT_EQ(two.at("kv"), "host-staged");
  EXPECT_EQ(two.at("x"), "host-staged");
  EXPECT_LE(two.at("predicted_peak_bytes").get<size_t>(), size_t(2) << 30);
  // ... and the staging tile fills what the budget leaves (1024-key steps:
  // 14,336 keys, not the 8,192 of powers of two), within one step of it.
  const int64_t tile = two.at("kv_block").get<int64_t>();
  EXPECT_EQ(tile % 1024, 0);
  EXPECT_GT(tile, 8192);
  EXPECT_GT(two.at("predicted_peak_bytes").get<size_t>() + size_t(4) * 1024 * 7168 * 2, size_t(2)
                                                                                            << 30);
  EXPECT_EQ(tight.at("x"), "device");
  const Result bad = run_cli("plan --tokens 217088 --vram-budget 1GiB");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_NE(bad.out.find("its smallest placement"), std::string::npos) << bad.out;
  // (the MLP phase of the smallest: x's two 16,895-row slots beside an MLP chunk)
  EXPECT_NE(bad.out.find("needs 1.67 GiB"), std::string::npos) << bad.out;
}

// h3s plan is made without a device and is for any GPU, so it counts the
// most each tier's decode path takes (K and V, 16-bit): kvfp4s' 16384-key
// blocks (Hopper's), kvi8r's 4096 (GPUs without its Hopper kernel); kvi8s
// has none.
TEST(Cli, PlanCountsTheDecodeBlocksOfKvfp4sAndKvi8r) {
  auto attn = [](const char* tier) {
    const Result r = run_cli(std::string("plan --json --tokens 217088 --kv-store ") + tier,
                             /*merge_stderr=*/false);
    EXPECT_EQ(r.code, 0) << tier << "\n" << r.out;
    return nlohmann::json::parse(r.out).at("predicted_phase_peaks").at("attn").get<int64_t>();
  };
  const int64_t S = 217088, heads = 56, hd = 128;
  auto decode = [&](int64_t keys) { return keys * heads * hd * 2 * 2; };
  const int64_t i8s = int64_t(h3s::KvI8sStore::bytes(S, heads, hd));
  EXPECT_EQ(attn("kvfp4s") - attn("kvi8s"), int64_t(h3s::KvFp4sStore::bytes(S, heads, hd)) - i8s +
                                                decode(h3s::kKvDecodeKeysHopper));
  EXPECT_EQ(attn("kvi8r") - attn("kvi8s"),
            int64_t(h3s::KvI8rStore::bytes(S, heads, hd)) - i8s + decode(h3s::kKvDecodeKeys));
}

// h3s bench's bit_equal and exit code: true and 0 when the streamed block's
// bits equal the stock block's; null ("not compared") and 0 when no stock
// block ran (--skip-stock, --only-attention), never a false that reads like a
// mismatch; false and exit 3 when they differ (forced here by the test-only
// hidden flag --test-flip-streamed-bit, which flips one bit of the streamed
// output before the comparison: on the CPU the two are equal by
// construction), every length still printed; its --help says so.
TEST(Cli, BenchExitsThreeWhenBitsDifferAndSaysWhenItDidNotCompare) {
  const std::string bench =
      "bench --preset tiny --threads 2 --q-chunk 97 --kv-chunk 131 --mlp-chunk 61 --json "
      "--skip-attention --token-list ";
  auto lines = [](const std::string& out) {
    std::vector<nlohmann::json> js;
    size_t at = 0;
    for (size_t nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1)
      js.push_back(nlohmann::json::parse(out.substr(at, nl - at)));
    return js;
  };
  Result r = run_cli(bench + "300", /*merge_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(lines(r.out).at(0).at("bit_equal"), true) << r.out;
  // The driver's count of the device in use: null where the backend cannot say
  // (the CPU's heap), never a 0 that reads like a measurement.
  EXPECT_TRUE(lines(r.out).at(0).at("device_in_use_driver_gib").is_null()) << r.out;

  for (const char* not_compared :
       {" --skip-stock", " --only-attention", " --skip-stock --test-flip-streamed-bit"}) {
    SCOPED_TRACE(not_compared);
    r = run_cli(bench + "300" + not_compared, /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(lines(r.out).at(0).at("bit_equal").is_null()) << r.out;
  }
  r = run_cli("bench --preset tiny --threads 2 --skip-attention --skip-stock --token-list 300");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| bit-equal not compared |"), std::string::npos) << r.out;

  r = run_cli(bench + "300,200 --test-flip-streamed-bit", /*merge_stderr=*/false);
  EXPECT_EQ(r.code, 3) << r.out;
  const std::vector<nlohmann::json> both = lines(r.out);
  ASSERT_EQ(both.size(), 2u) << r.out;  // the second length ran after the first differed
  for (const nlohmann::json& j : both) EXPECT_EQ(j.at("bit_equal"), false) << j.dump();
  r = run_cli(
      "bench --preset tiny --threads 2 --skip-attention --token-list 300 "
      "--test-flip-streamed-bit");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("| bit-equal NO (bits differ) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h3s bench: the streamed block's bits differ from the stock block's at "
                       "300 tokens"),
            std::string::npos)
      << r.out;

  const Result help = run_cli("bench --help");
  EXPECT_EQ(help.code, 0) << help.out;
  EXPECT_NE(help.out.find("Exit codes: 0 when every stock vs streamed comparison found the same "
                          "bits"),
            std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("3 when a comparison found different bits"), std::string::npos)
      << help.out;
  EXPECT_EQ(help.out.find("--test-flip-streamed-bit"), std::string::npos) << "a test-only flag";
}

TEST(Cli, DemoExitsThreeWhenBitsDiffer) {
  // The mismatch path, forced by the hidden test flag: exit 3 (not 1, other errors), the
  // table and the JSON both say so.
  Result r = run_cli("demo --tokens 300 --threads 2 --test-flip-streamed-bit");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("bit-equal: NO"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("h3s demo: the streamed forward's bits differ"), std::string::npos) << r.out;
  r = run_cli("demo --tokens 300 --threads 2 --json --test-flip-streamed-bit",
              /*merge_stderr=*/false);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("bit_equal"), false) << r.out;
  const Result help = run_cli("demo --help");
  EXPECT_NE(help.out.find("3 when they differ"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("--test-flip-streamed-bit"), std::string::npos) << "a test-only flag";
}

TEST(Cli, TooSmallBudgetFailsWithTheNumbers) {
  const Result r = run_cli("demo --tokens 300 --memory-budget 1MiB");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("memory budget 1.00 MiB"), std::string::npos) << r.out;
}

TEST(Cli, HelpListsEveryControl) {
  const Result r = run_cli("demo --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--q-chunk",          "--kv-chunk",
                           "--mlp-chunk",        "--min-tokens",
                           "--kv-block",         "--final-layer-chunk",
                           "--final-layer-gemm", "--self-check",
                           "--format",           "--tokens",
                           "--frames",           "--width",
                           "--height",           "--text-len",
                           "--audio-len",        "--seed",
                           "--threads",          "--kv-store",
                           "--trim-forward",     "--json",
                           "--attn-kernel",      "--gemm-kernel"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

// Every command's --help is text: no control bytes (an enum option once
// printed its mapped values as raw bytes), and it names --kv-placement's values.
TEST(Cli, HelpIsPrintableText) {
  for (const char* cmd : {"", "demo", "run", "bench", "plan", "kvbench", "forward", "make-inputs",
                          "make-checkpoint", "inspect"}) {
    SCOPED_TRACE(cmd);
    const Result r = run_cli(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << r.out;
    for (size_t i = 0; i < r.out.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(r.out[i]);
      ASSERT_TRUE(c >= 0x20 || c == '\n' || c == '\t')
          << "byte " << int(c) << " at " << i << ": " << r.out.substr(i > 40 ? i - 40 : 0, 80);
    }
  }
  EXPECT_NE(run_cli("bench --help").out.find("{auto, device, host}"), std::string::npos);
  EXPECT_NE(run_cli("demo --help").out.find("{default,sm80,sm90,sm80-1slab}"), std::string::npos);
  // A default shown is the default: no negated flag's {false} beside a flag that is on.
  EXPECT_EQ(run_cli("demo --help").out.find("{false}"), std::string::npos);
}

// The kernel requests (for the CUDA backend's comparison runs) are controls
// like the others: the CPU backend, one kernel per op, runs them with the
// same bits, and the JSON records them; a name that is no request (a variant
// removed from the build, say) exits 2 naming the choices.
TEST(Cli, KernelRequestsAreControls) {
  const Result ok = run_cli("demo --tokens 200 --json --attn-kernel sm80 --gemm-kernel sm80",
                            /*merge_stderr=*/false);
  ASSERT_EQ(ok.code, 0) << ok.out;
  const nlohmann::json j = nlohmann::json::parse(ok.out);
  EXPECT_TRUE(j["bit_equal"].get<bool>());
  EXPECT_EQ(j["controls"]["attn_kernel"], "sm80");
  EXPECT_EQ(j["controls"]["gemm_kernel"], "sm80");
  for (const char* bad :
       {"demo --attn-kernel ws-s3", "demo --gemm-kernel s3p2",
        "bench --only-attention --attn-kernels ws-s3", "kvbench --attn-kernel mma"}) {
    const Result r = run_cli(bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("sm80"), std::string::npos) << bad << ": " << r.out;
  }
}

// --trim-forward is on unless --no-trim-forward turns it off (the demo's
// JSON echoes the control).
TEST(Cli, NoTrimForwardTurnsTheDefaultOff) {
  for (const auto& [flags, want] : {std::pair<const char*, bool>{"", true},
                                    {"--no-trim-forward", false},
                                    {"--trim-forward", true}}) {
    const Result r =
        run_cli(std::string("demo --tokens 200 --json ") + flags, /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << flags << ": " << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["controls"]["trim_forward"].get<bool>(), want) << flags;
  }
}

}  // namespace

namespace {

// Issue flow: make-checkpoint -> inspect -> demo --checkpoint, every format.
TEST(CliCheckpoint, MakeInspectAndRunEveryFormat) {
  const std::string dir = ::testing::TempDir();
  for (const char* format : {"bf16", "int8", "w4a8", "nvfp4"}) {
    const std::string file = dir + "/h3s_cli_tiny_" + format + ".safetensors";
    Result r = run_cli(std::string("make-checkpoint --preset tiny --blocks 1 --format ") + format +
                       " " + file);
    ASSERT_EQ(r.code, 0) << r.out;
    // Progress as blocks are built (1 refiner block + 1 DiT block), then the file.
    const size_t one = r.out.find("h3s: built 1/2 blocks"), two = r.out.find("h3s: built 2/2");
    EXPECT_NE(one, std::string::npos) << r.out;
    EXPECT_NE(two, std::string::npos) << r.out;
    EXPECT_LT(one, two) << r.out;
    EXPECT_LT(two, r.out.find("h3s: writing")) << r.out;
    r = run_cli("inspect --json " + file, /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.at("valid").get<bool>());
    EXPECT_EQ(j.at("config").at("blocks"), 1);
    EXPECT_EQ(j.at("config").at("hidden"), 512);
    if (std::string(format) != "bf16") {
      EXPECT_EQ(j.at("linear_formats").at(format).at("layers"), 8) << r.out;  // 1 block + 1 refiner
      // fp32 islands of a quantised file are held as bf16, as ComfyUI's loader holds them.
      EXPECT_EQ(j.at("linear_formats").at("f32 (bf16 values)").at("layers"), 6) << r.out;
      EXPECT_FALSE(j.at("linear_formats").contains("f32")) << r.out;
    } else {
      EXPECT_EQ(j.at("linear_formats").at("f32").at("layers"), 6) << r.out;
    }
    r = run_cli("demo --json --tokens 300 --threads 2 --checkpoint " + file, false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json d = nlohmann::json::parse(r.out);
    EXPECT_TRUE(d.at("bit_equal").get<bool>());
    EXPECT_EQ(d.at("format"), format);
    std::remove(file.c_str());
  }
}

TEST(CliCheckpoint, InspectReportsTheFirstProblem) {
  const std::string file = ::testing::TempDir() + "/h3s_cli_not_h3.safetensors";
  {
    FILE* f = std::fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    const uint64_t n = header.size();
    std::fwrite(&n, 8, 1, f);
    std::fwrite(header.data(), 1, header.size(), f);
    const float v = 1.0f;
    std::fwrite(&v, 4, 1, f);
    std::fclose(f);
  }
  const Result r = run_cli("inspect " + file);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("first problem"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("video_patch_proj.weight"), std::string::npos) << r.out;
  std::remove(file.c_str());
}

// h3s kvbench, issue 12's accuracy harness: each approximate tier against the
// exact attention, beside the recipe it improves on. On gaussian inputs the
// tiers stay within the issue's bounds (kvi8r 0.013, kvi8s 0.039, kvfp4s
// 0.192); on the outlier inputs the rotation pays (kvi8r at or below per-row
// int8, kvi8s at most 0.6x the unrotated SageAttention-2 layout) and so does
// kvfp4s' K mean (at or below rotated NVFP4 without it). Bytes an element
// are the engine store's, its kept tail included: at 300 tokens kvi8s' 2.03
// is its open tile's bf16 rows and the padded last tile (1.04 at 217k), and
// kvfp4s' ~2.3 its open 256-token block's (0.569 at 217k: the 0.57 bound is
// KvFp4s.BytesPerElementAtH3Shapes').
TEST(Cli, KvbenchMeasuresEachTierAgainstExactAndItsBaseline) {
  struct Bounds {
    std::string tier;
    double gaussian, outlier_ratio, min_bytes, max_bytes, min_cosine;
  };
  for (const Bounds& b :
       {Bounds{"kvi8r", 0.013, 1.0, 1.0, 1.1, 0.99}, Bounds{"kvi8s", 0.039, 0.6, 1.0, 2.1, 0.99},
        Bounds{"kvfp4s", 0.192, 1.0, 0.5625, 2.4, 0.9}}) {
    const std::string& tier = b.tier;
    const Result r = run_cli("kvbench --json --tokens 300 --heads 2 --kv-store " + tier,
                             /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("kv_store"), tier);
    EXPECT_EQ(j.at("approximate"), true);
    EXPECT_EQ(j.at("tier_kernel"), "reference");  // the CPU's (the device runs name theirs)
    EXPECT_GT(j.at("bytes_per_element").get<double>(), b.min_bytes);
    EXPECT_LE(j.at("bytes_per_element").get<double>(), b.max_bytes);
    ASSERT_EQ(j.at("inputs").size(), 2u);
    for (const nlohmann::json& in : j.at("inputs")) {
      SCOPED_TRACE(tier + " " + in.at("name").get<std::string>());
      const double e = in.at("rel_rms").get<double>(),
                   base = in.at("baseline_rel_rms").get<double>();
      EXPECT_GT(e, 0.0) << "an approximate tier gave the exact bits";
      EXPECT_GT(in.at("cosine").get<double>(), b.min_cosine);
      if (in.at("name") == "gaussian")
        EXPECT_LE(e, b.gaussian);
      else
        EXPECT_LE(e, b.outlier_ratio * base);
    }
  }
  const Result bad = run_cli("kvbench --kv-store kvi4");  // not a tier
  EXPECT_EQ(bad.code, 2) << bad.out;
}

// kvbench --kv-store kvmix: the error lies between its two stores' (kvi8s on
// every head, reported beside it, and kvfp4s on every head, its baseline),
// on heads the calibration picked (half of them) or given ones; its bytes
// between theirs; a bad head list is refused by name.
TEST(Cli, KvbenchKvmixLiesBetweenItsTwoStores) {
  const Result r = run_cli("kvbench --json --tokens 600 --heads 4 --kv-store kvmix", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("kv_store"), "kvmix");
  EXPECT_TRUE(j.at("approximate").get<bool>());
  for (const nlohmann::json& in : j.at("inputs")) {
    SCOPED_TRACE(in.at("name").get<std::string>());
    EXPECT_EQ(in.at("kv_mix_heads").size(), 2u);
    EXPECT_EQ(in.at("baseline"), "kvfp4s on every head");
    EXPECT_LT(in.at("kvi8s_rel_rms").get<double>(), in.at("rel_rms").get<double>());
    EXPECT_LT(in.at("rel_rms").get<double>(), in.at("baseline_rel_rms").get<double>());
  }
  const Result given = run_cli(
      "kvbench --json --tokens 300 --heads 4 --kv-store kvmix --kv-mix-heads 3,0 "
      "--inputs gaussian",
      false);
  ASSERT_EQ(given.code, 0) << given.out;
  EXPECT_EQ(nlohmann::json::parse(given.out).at("inputs").at(0).at("kv_mix_heads"),
            nlohmann::json::array({0, 3}));
  const Result bad = run_cli("kvbench --tokens 300 --heads 4 --kv-store kvmix --kv-mix-heads 4");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("head 4"), std::string::npos) << bad.out;
}

// --no-baseline (the GPU runs at 217k, where the host baseline would take
// hours): the tier's error is still measured, the baseline is null, and the
// inputs do not depend on the thread count (seeded 256-token blocks).
TEST(Cli, KvbenchWithoutBaselineAndThreadIndependentInputs) {
  const std::string cmd = "kvbench --json --tokens 300 --heads 2 --kv-store kvi8r --inputs outlier";
  const Result one = run_cli(cmd + " --no-baseline --threads 1", /*merge_stderr=*/false);
  const Result many = run_cli(cmd + " --threads 3", /*merge_stderr=*/false);
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(many.code, 0) << many.out;
  const nlohmann::json a = nlohmann::json::parse(one.out).at("inputs").at(0),
                       b = nlohmann::json::parse(many.out).at("inputs").at(0);
  EXPECT_TRUE(a.at("baseline_rel_rms").is_null());
  EXPECT_GT(b.at("baseline_rel_rms").get<double>(), 0.0);
  EXPECT_EQ(a.at("rel_rms").get<double>(), b.at("rel_rms").get<double>());
  EXPECT_GT(a.at("rel_rms").get<double>(), 0.0);
  EXPECT_FALSE(a.contains("tops")) << "speed columns are GPU-only";
}

// --repeat N runs each attention N times over the same store (for warm
// timings at short sequences). Every run starts from the inputs' q (the
// rotated tiers rotate it in place: a second run on the rotated q gave
// rel-rms 1.09) and a fresh softmax state, so the outputs, and the error, are
// those of one run; 0 is refused.
TEST(Cli, KvbenchRepeatKeepsTheResult) {
  const std::string cmd =
      "kvbench --json --tokens 200 --heads 2 --kv-store kvi8s --inputs gaussian --no-baseline";
  const Result once = run_cli(cmd, /*merge_stderr=*/false);
  const Result twice = run_cli(cmd + " --repeat 2", /*merge_stderr=*/false);
  ASSERT_EQ(once.code, 0) << once.out;
  ASSERT_EQ(twice.code, 0) << twice.out;
  EXPECT_EQ(nlohmann::json::parse(once.out).at("inputs").at(0).at("rel_rms").get<double>(),
            nlohmann::json::parse(twice.out).at("inputs").at(0).at("rel_rms").get<double>());
  const Result zero = run_cli(cmd + " --repeat 0");
  EXPECT_EQ(zero.code, 2) << zero.out;
  EXPECT_NE(zero.out.find("--repeat"), std::string::npos) << zero.out;
}

}  // namespace
