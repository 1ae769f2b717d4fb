// `h3s forward` / `h3s make-inputs`: real inputs from a file, outputs to a
// file, streamed == stock by hash, and every bad inputs file refused with one
// line naming the tensor, before any work and without writing the output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "core/dtype.hpp"
#include "model/safetensors.hpp"

namespace h3s {
namespace {

using cli_test::Result;
using cli_test::run_cli;

std::string tmp(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("h3s_fwd_" + name)).string();
}

const std::string& checkpoint() {
  static const std::string path = [] {
    const std::string p = tmp("tiny_int8.safetensors");
    const Result r = run_cli("make-checkpoint --preset tiny --blocks 1 --format int8 " + p);
    EXPECT_EQ(r.code, 0) << r.out;
    return p;
  }();
  return path;
}

TEST(CliForward, StreamedEqualsStockAndWritesThePredictions) {
  const std::string in = tmp("in.safetensors"), a = tmp("a.safetensors"), b = tmp("b.safetensors");
  Result r = run_cli("make-inputs --checkpoint " + checkpoint() + " --output " + in +
                     " --latent-t 2 --latent-h 6 --latent-w 5 --audio-frames 9 --text-len 7 "
                     "--cond-frames 1 --sigma 0.4");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string common = "forward --checkpoint " + checkpoint() + " --inputs " + in;
  r = run_cli(common + " --json --output " + a +
                  " --q-chunk 13 --kv-chunk 29 --mlp-chunk 7 "
                  "--min-tokens 0 --final-layer-chunk 11 --merge-tail-below 0",
              false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json streamed = nlohmann::json::parse(r.out);
  r = run_cli(common + " --json --output " + b + " --stock", false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json stock = nlohmann::json::parse(r.out);
  EXPECT_EQ(streamed.at("streamed_blocks"), 1);
  EXPECT_EQ(stock.at("stock_blocks"), 1);
  EXPECT_EQ(streamed.at("output_hash"), stock.at("output_hash"));
  // text 7 | cond 1 x 3 x 3 | audio 18 | video 2 x 3 x 3 (width 5 padded to 6)
  EXPECT_EQ(stock.at("tokens"), 7 + 9 + 18 + 18);
  const SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  EXPECT_EQ(fa.entry("video").shape, (std::vector<int64_t>{1, 24, 2, 6, 5}));
  EXPECT_EQ(fa.entry("audio").shape, (std::vector<int64_t>{1, 32, 2, 9}));
  EXPECT_EQ(fa.entry("video").dtype, "BF16");
  EXPECT_EQ(fa.read_as<uint16_t>("video", "BF16"), fb.read_as<uint16_t>("video", "BF16"));
  for (uint16_t v : fa.read_as<uint16_t>("audio", "BF16"))
    ASSERT_TRUE(std::isfinite(bf16_to_f32(bf16{v})));
  // Human output: a summary line with the hash.
  r = run_cli(common + " --output " + b + " --stock");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(stock.at("output_hash").get<std::string>()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("block 1/1"), std::string::npos) << r.out;  // progress
}

// Writes an inputs file from the good one with `edit` applied.
std::string edited_inputs(const std::string& name,
                          const std::function<void(std::vector<WriteEntry>&)>& edit) {
  static std::vector<std::vector<std::byte>> keep;  // the entries' bytes
  const std::string good = tmp("good.safetensors");
  const Result r = run_cli("make-inputs --checkpoint " + checkpoint() + " --output " + good +
                           " --latent-t 1 --latent-h 4 --latent-w 4 --audio-frames 3 "
                           "--text-len 3");
  EXPECT_EQ(r.code, 0) << r.out;
  const SafetensorsFile f = SafetensorsFile::open(good);
  std::vector<WriteEntry> entries;
  for (const std::string& n : f.names()) {
    const TensorEntry& e = f.entry(n);
    keep.emplace_back(e.data, e.data + e.bytes);
    entries.push_back({n, e.dtype, e.shape, keep.back()});
  }
  edit(entries);
  const std::string path = tmp(name + ".safetensors");
  write_safetensors(path, entries, {});
  return path;
}

WriteEntry* find(std::vector<WriteEntry>& v, const std::string& name) {
  for (WriteEntry& e : v)
    if (e.name == name) return &e;
  return nullptr;
}

TEST(CliForward, BadInputsFilesAreRefusedNamingTheTensor) {
  static const float nan_sigma = std::nanf(""), big_sigma = 3.0f;
  static const std::vector<std::byte> video_i8(size_t(24 * 16), std::byte{1});
  static const std::vector<std::byte> video_25(size_t(25 * 16 * 2), std::byte{0});
  struct Bad {
    std::string name;
    std::function<void(std::vector<WriteEntry>&)> edit;
    int code;
    std::vector<std::string> words;
  };
  const std::vector<Bad> bad = {
      {"missing_sigma",
       [](auto& v) { std::erase_if(v, [](auto& e) { return e.name == "sigma"; }); },
       1,
       {"missing tensor 'sigma'"}},
      {"extra",
       [](auto& v) {
         v.push_back({"noise", "F32", {1}, {reinterpret_cast<const std::byte*>(&big_sigma), 4}});
       },
       1,
       {"unexpected tensor 'noise'"}},
      {"int8_video",
       [](auto& v) {
         *find(v, "video_latent") = {"video_latent", "I8", {1, 24, 1, 4, 4}, video_i8};
       },
       1,
       {"video_latent", "I8", "BF16 or F32"}},
      {"channels",
       [](auto& v) {
         *find(v, "video_latent") = {"video_latent", "BF16", {1, 25, 1, 4, 4}, video_25};
       },
       2,
       {"video_latent", "25 channels", "24"}},
      {"nan_sigma",
       [](auto& v) {
         find(v, "sigma")->bytes = {reinterpret_cast<const std::byte*>(&nan_sigma), 4};
       },
       2,
       {"sigma", "finite"}},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    const std::string in = edited_inputs(b.name, b.edit), out = tmp("never_" + b.name);
    const Result r =
        run_cli("forward --checkpoint " + checkpoint() + " --inputs " + in + " --output " + out);
    EXPECT_EQ(r.code, b.code) << r.out;
    for (const std::string& w : b.words)
      EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' not in: " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), b.code == 2 ? 2 : 1) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << "output written on a bad call";
  }
}

// Output paths are checked before any work: never one of the command's inputs,
// never into a missing folder; make-inputs checks its sigma, plan refuses the
// budget it does not plan, and a thread count past the host's is named.
TEST(CliForward, OutputsAndCountsAreCheckedBeforeAnyWork) {
  const std::string in = tmp("paths_in.safetensors");
  ASSERT_EQ(run_cli("make-inputs --checkpoint " + checkpoint() + " --output " + in +
                    " --latent-t 1 --latent-h 4 --latent-w 4 --audio-frames 3 --text-len 5")
                .code,
            0);
  const auto size_of = [](const std::string& p) { return std::filesystem::file_size(p); };
  const uintmax_t checkpoint_bytes = size_of(checkpoint()), inputs_bytes = size_of(in);
  const std::string forward = "forward --checkpoint " + checkpoint() + " --inputs " + in;
  const struct {
    std::string args;
    std::vector<std::string> words;
  } cases[] = {
      {forward + " --output " + checkpoint(), {"--output", "is the input", checkpoint()}},
      {forward + " --output " + in, {"--output", "is the input", in}},
      {forward + " --output " + tmp("no_dir/out.safetensors"), {"does not exist"}},
      {forward + " --output /dev/null", {"is not a regular file"}},
      {"make-inputs --checkpoint " + checkpoint() + " --output " + checkpoint(), {"is the input"}},
      {"make-inputs --checkpoint " + checkpoint() + " --output " + tmp("s.safetensors") +
           " --sigma 5",
       {"--sigma = 5 must be in [0, 1]"}},
      {"make-inputs --checkpoint " + checkpoint() + " --output " + tmp("s.safetensors") +
           " --latent-t 100000 --latent-h 100000 --latent-w 100000",
       {"more than 2^31 latent positions"}},
      {"make-checkpoint --preset tiny " + tmp("no_dir/ck.safetensors"), {"does not exist"}},
      {"plan --preset tiny --memory-budget 1MiB", {"plans --vram-budget"}},
      {"demo --tokens 300 --threads 100000", {"--threads: 100000 is more than this host can use"}},
  };
  for (const auto& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    for (const std::string& w : c.words)
      EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' not in: " << r.out;
    EXPECT_EQ(r.out.find("loading"), std::string::npos) << "work began: " << r.out;
    EXPECT_EQ(r.out.find("building"), std::string::npos) << "work began: " << r.out;
  }
  EXPECT_EQ(size_of(checkpoint()), checkpoint_bytes);
  EXPECT_EQ(size_of(in), inputs_bytes);
  EXPECT_FALSE(std::filesystem::exists(tmp("s.safetensors")));
}

}  // namespace
}  // namespace h3s
