// Output paths checked before a command's work, and whole-or-nothing writes
// (model/output_file.hpp): an input is never the output, a symlink's target is
// written and the link kept, devices and directories are refused, a missing or
// read-only directory is named, and no temporary file survives a failure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/output_file.hpp"
#include "temp_dir.hpp"

namespace h3s {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

class OutputFile : public ::testing::Test {
 protected:
  ~OutputFile() override {
    std::error_code ec;  // the read-only folder's files must go with the rest
    fs::permissions(dir_ / "ro", fs::perms::owner_all, ec);
  }
  std::string file(const std::string& name) const { return tmp_.file(name); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static std::vector<std::string> names(const fs::path& d) { return TempDir::names_in(d); }
  static void expect_refused(const std::string& path, const std::vector<std::string>& inputs,
                             const std::vector<std::string>& needles) {
    try {
      (void)checked_output_path(path, "--output", inputs);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << e.what();
      for (const std::string& n : needles)
        EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " not in " << e.what();
    }
  }
  test::TempDir tmp_{"h3s_output"};
  const fs::path& dir_ = tmp_.path();
};

TEST_F(OutputFile, AnInputIsNeverTheOutput) {
  write("model.safetensors", "weights");
  const std::string in = file("model.safetensors");
  expect_refused(in, {in}, {"--output", "is the input", "another output path"});
  // The same file by another name: a relative path, a symlink.
  fs::create_symlink(in, dir_ / "link.safetensors");
  expect_refused(file("link.safetensors"), {in}, {"is the input"});
  expect_refused(file("./model.safetensors"), {"", in}, {"is the input"});
  EXPECT_EQ(read("model.safetensors"), "weights");
  // A new file beside it is fine.
  EXPECT_EQ(checked_output_path(file("out.safetensors"), "--output", {in}),
            file("out.safetensors"));
}

TEST_F(OutputFile, DirectoriesDevicesAndMissingOrReadOnlyFoldersAreNamed) {
  fs::create_directory(dir_ / "sub");
  expect_refused(file("sub"), {}, {"is not a regular file"});
  expect_refused("/dev/null", {}, {"/dev/null", "is not a regular file"});
  expect_refused(file("missing/out.safetensors"), {}, {"does not exist", "create it first"});
  // A read-only folder (root writes into any folder: there the check cannot
  // trip, and the write's own error names the reason).
  fs::create_directory(dir_ / "ro");
  fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(file("ro").c_str(), W_OK) != 0)
    expect_refused(file("ro/out.safetensors"), {}, {"cannot write into", "Permission denied"});
}

TEST_F(OutputFile, ASymlinkIsWrittenThroughAndKept) {
  fs::create_directory(dir_ / "store");
  write("store/target.safetensors", "old");
  fs::create_symlink(dir_ / "store" / "target.safetensors", dir_ / "link.safetensors");
  const std::string out = checked_output_path(file("link.safetensors"), "--output");
  EXPECT_EQ(out, file("store/target.safetensors"));
  write_file_atomically(out, [](const std::string& tmp) {
    std::ofstream(tmp) << "new";
    return true;
  });
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.safetensors"));
  EXPECT_EQ(read("link.safetensors"), "new");
  EXPECT_EQ(names(dir_ / "store"), std::vector<std::string>{"target.safetensors"});
}

TEST_F(OutputFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  write("out.safetensors", "old");
  write("out.safetensors.tmp", "the user's own file");
  const std::string out = file("out.safetensors");
  // The writer fails, or throws: the old file stays, no temp file is left,
  // and a file named like the old fixed temp name is not touched.
  EXPECT_THROW(write_file_atomically(out,
                                     [](const std::string& tmp) {
                                       std::ofstream(tmp) << "partial";
                                       return false;
                                     }),
               Error);
  EXPECT_THROW(write_file_atomically(out,
                                     [](const std::string& tmp) -> bool {
                                       std::ofstream(tmp) << "partial";
                                       throw std::runtime_error("interrupted");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read("out.safetensors"), "old");
  EXPECT_EQ(read("out.safetensors.tmp"), "the user's own file");
  EXPECT_EQ(names(dir_), (std::vector<std::string>{"out.safetensors", "out.safetensors.tmp"}));
  write_file_atomically(out, [](const std::string& tmp) {
    std::ofstream(tmp) << "new";
    return true;
  });
  EXPECT_EQ(read("out.safetensors"), "new");
}

}  // namespace
}  // namespace h3s
