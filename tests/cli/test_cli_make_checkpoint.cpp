// h3s make-checkpoint --weights drawn: every format writes a file that
// inspect and demo accept, with the seeded file's keys, dtypes and shapes;
// the bytes do not depend on --threads; bad paths and flags exit 2 before any
// work; no .part file is left.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "model/safetensors.hpp"

namespace h3s {
namespace {

using cli_test::Result;
using cli_test::run_cli;
namespace fs = std::filesystem;

// A fresh directory for one test's files, removed with them.
struct Dir {
  fs::path path = fs::path(::testing::TempDir()) /
                  ("h3s_cli_mkck_" +
                   std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(CliMakeCheckpoint, DrawnEveryFormatInspectsAndRuns) {
  const Dir dir;
  for (const std::string format : {"bf16", "int8", "w4a8", "nvfp4"}) {
    SCOPED_TRACE(format);
    const std::string drawn = dir.file(format + "_drawn.safetensors");
    const std::string seeded = dir.file(format + "_seeded.safetensors");
    Result r = run_cli("make-checkpoint --preset tiny --blocks 1 --weights drawn --format " +
                       format + " " + drawn);
    ASSERT_EQ(r.code, 0) << r.out;
    // The whole tiny file is one batch: no per-block line before the end
    // (CheckpointDrawnFormat.ReportsBlocksRunByRunThenTheEnd checks those).
    EXPECT_NE(r.out.find("h3s: drawing tiny " + format), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("h3s: wrote all 1 blocks"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("drawn weights"), std::string::npos) << r.out;
    ASSERT_EQ(
        run_cli("make-checkpoint --preset tiny --blocks 1 --format " + format + " " + seeded).code,
        0);

    // The seeded file's keys, dtypes and shapes.
    const SafetensorsFile d = SafetensorsFile::open(drawn), s = SafetensorsFile::open(seeded);
    ASSERT_EQ(d.names(), s.names());
    for (const std::string& n : d.names()) {
      EXPECT_EQ(d.entry(n).dtype, s.entry(n).dtype) << n;
      EXPECT_EQ(d.entry(n).shape, s.entry(n).shape) << n;
    }
    EXPECT_EQ(d.metadata().at("h3stream_weights"), "drawn");

    r = run_cli("inspect --json " + drawn, /*merge_stderr=*/false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j.at("valid").get<bool>());
    EXPECT_EQ(j.at("config").at("blocks"), 1);
    const Result seeded_inspect = run_cli("inspect --json " + seeded, false);
    EXPECT_EQ(j.at("linear_formats"),
              nlohmann::json::parse(seeded_inspect.out).at("linear_formats"));

    // A forward over the drawn weights: stock and streamed agree (so both ran, finite).
    r = run_cli("demo --json --tokens 300 --threads 2 --checkpoint " + drawn, false);
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json demo = nlohmann::json::parse(r.out);
    EXPECT_TRUE(demo.at("bit_equal").get<bool>());
    EXPECT_EQ(demo.at("format"), format);
  }
  for (const std::string& n : dir.names()) EXPECT_FALSE(n.ends_with(".part")) << n;
}

TEST(CliMakeCheckpoint, DrawnBytesDoNotDependOnThreads) {
  const Dir dir;
  for (const char* threads : {"1", "3"}) {
    const Result r =
        run_cli(std::string("make-checkpoint --preset tiny --format w4a8 --weights drawn --seed 4 "
                            "--threads ") +
                threads + " " + dir.file(std::string("t") + threads + ".safetensors"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(std::string(", ") + threads + " threads)"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(file_bytes(dir.file("t1.safetensors")) == file_bytes(dir.file("t3.safetensors")));
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"t1.safetensors", "t3.safetensors"}));
}

// Bad outputs and flags: exit 2, one line naming the problem, before any work.
TEST(CliMakeCheckpoint, BadPathsAndFlagsExit2BeforeWork) {
  const Dir dir;
  const std::string missing = dir.file("no_dir/ck.safetensors");
  const struct {
    std::string args;
    std::vector<std::string> words;
  } cases[] = {
      {"make-checkpoint --preset tiny --weights drawn " + missing, {missing, "does not exist"}},
      {"make-checkpoint --preset tiny --weights drawn " + dir.path.string(),
       {"is not a regular file"}},
      {"make-checkpoint --preset tiny --weights sampled " + dir.file("a.safetensors"),
       {"--weights", "sampled"}},
      {"make-checkpoint --preset tiny --threads 2 " + dir.file("a.safetensors"),
       {"--threads", "--weights drawn"}},
      {"make-checkpoint --preset tiny --weights drawn --threads 100000 " +
           dir.file("a.safetensors"),
       {"100000 is more than this host can use"}},
  };
  for (const auto& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    for (const std::string& w : c.words)
      EXPECT_NE(r.out.find(w), std::string::npos) << "'" << w << "' not in: " << r.out;
    EXPECT_EQ(r.out.find("drawing"), std::string::npos) << "work began: " << r.out;
    EXPECT_EQ(r.out.find("building"), std::string::npos) << "work began: " << r.out;
  }
  EXPECT_TRUE(dir.names().empty());
}

}  // namespace
}  // namespace h3s
