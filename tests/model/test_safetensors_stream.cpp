// SafetensorsStreamWriter: the same bytes as write_safetensors whatever the
// pieces, tensors only in data order, "<path>.part" renamed at the end and
// removed on any failure, and write failures naming the file and the reason.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint_entries.hpp"
#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_stream.hpp"
#include "temp_dir.hpp"

namespace h3s::test {
namespace {

using test::TempDir;

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Mixed element sizes, odd byte counts, a scalar and an empty tensor.
std::vector<Owned> sample_entries() {
  std::vector<float> f(37);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(i) * 0.5f - 3.0f;
  std::vector<uint16_t> h(130);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(i * 7);
  std::vector<uint8_t> u(13);
  for (size_t i = 0; i < u.size(); ++i) u[i] = uint8_t(200 + i);
  return {{"z.f32", "F32", {37}, as_bytes(f)},
          {"a.bf16", "BF16", {10, 13}, as_bytes(h)},
          {"m.u8", "U8", {13}, as_bytes(u)},
          {"b.i8", "I8", {0, 4}, {}},
          {"s.scalar", "F32", {}, as_bytes(std::vector<float>{2.5f})}};
}

std::vector<TensorDecl> decls_of(const std::vector<Owned>& entries) {
  std::vector<TensorDecl> d;
  for (const Owned& o : entries) d.push_back({o.name, o.dtype, o.shape, std::nullopt});
  return d;
}

const Owned& named(const std::vector<Owned>& v, const std::string& name) {
  for (const Owned& o : v)
    if (o.name == name) return o;
  throw std::runtime_error("no " + name);
}

TEST(SafetensorsStream, SameBytesAsTheInMemoryWriterInAnyPieces) {
  TempDir dir;
  const std::vector<Owned> entries = sample_entries();
  const std::map<std::string, std::string> md = {{"format", "pt"}, {"note", "x"}};
  write_entries(dir.file("whole.safetensors"), entries, md);
  for (size_t piece : {size_t(1), size_t(3), size_t(1000)}) {
    SCOPED_TRACE(piece);
    const std::string path = dir.file("stream.safetensors");
    SafetensorsStreamWriter w(path, decls_of(entries), md);
    EXPECT_EQ(w.part_path(), path + ".part");
    for (const SafetensorsLayout::Placed& p : w.layout().tensors) {
      const std::vector<std::byte>& b = named(entries, p.decl.name).data;
      for (size_t at = 0; at < b.size(); at += piece)
        w.write(p.decl.name, std::span(b).subspan(at, std::min(piece, b.size() - at)));
    }
    w.finish();
    EXPECT_EQ(file_bytes(path), file_bytes(dir.file("whole.safetensors")));
    EXPECT_EQ(dir.names(), (std::vector<std::string>{"stream.safetensors", "whole.safetensors"}));
  }
}

template <class F>
void expect_error(ErrorKind kind, F&& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "'" << w << "' not in " << e.what();
  }
}

TEST(SafetensorsStream, RefusesOutOfOrderOverlongAndIncompleteWrites) {
  TempDir dir;
  const std::vector<Owned> entries = sample_entries();
  const std::string path = dir.file("x.safetensors");
  {
    SafetensorsStreamWriter w(path, decls_of(entries), {});
    const auto& order = w.layout().tensors;  // F32 first: s.scalar, z.f32, then a.bf16, ...
    ASSERT_EQ(order[0].decl.name, "s.scalar");
    expect_error(ErrorKind::invalid_argument,
                 [&] { w.write("z.f32", named(entries, "z.f32").data); },
                 {"'z.f32'", "out of order", "'s.scalar'"});
    w.write("s.scalar", named(entries, "s.scalar").data);
    expect_error(ErrorKind::invalid_argument,
                 [&] { w.write("s.scalar", named(entries, "s.scalar").data); },
                 {"'s.scalar'", "4 more bytes"});
    w.write("z.f32", std::span(named(entries, "z.f32").data).first(8));
    expect_error(ErrorKind::invalid_argument, [&] { w.finish(); }, {"'z.f32' incomplete"});
    EXPECT_EQ(dir.names(), std::vector<std::string>{"x.safetensors.part"});
  }
  // Destroyed unfinished: nothing is left, and no file looks complete.
  EXPECT_TRUE(dir.names().empty());
}

TEST(SafetensorsStream, ChecksTheTensorsBeforeCreatingAnyFile) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  expect_error(ErrorKind::bad_input,
               [&] {
                 SafetensorsStreamWriter w(path, {{"x", "F33", {2}, std::nullopt}}, {});
               },
               {path, "'x'", "unknown dtype"});
  expect_error(ErrorKind::bad_input,
               [&] {
                 SafetensorsStreamWriter w(
                     path, {{"x", "F32", {2}, std::nullopt}, {"x", "F32", {2}, std::nullopt}}, {});
               },
               {"'x' given twice"});
  expect_error(ErrorKind::bad_input,
               [&] {
                 SafetensorsStreamWriter w(path, {{"x", "F32", {-2}, std::nullopt}}, {});
               },
               {"negative dimension"});
  expect_error(ErrorKind::bad_input,
               [&] {
                 SafetensorsStreamWriter w(path, {{"x", "F32", {2}, 7}}, {});
               },
               {"has 7 bytes", "needs 8"});
  EXPECT_TRUE(dir.names().empty());
  const std::string missing = dir.file("no_dir/x.safetensors");
  expect_error(ErrorKind::bad_input, [&] { SafetensorsStreamWriter w(missing, {}, {}); },
               {missing + ".part", "cannot create", std::strerror(ENOENT)});
}

// A write the system refuses (here a file-size limit, as a full disk would)
// names the .part file and the system's reason, and leaves nothing behind.
TEST(SafetensorsStream, WriteFailureNamesTheFileAndTheReason) {
  TempDir dir;
  const std::string path = dir.file("big.safetensors");
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    SafetensorsStreamWriter w(path, {{"w", "U8", {65536}, std::nullopt}}, {});
    w.write("w", std::vector<std::byte>(65536));
    w.finish();
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find(path + ".part"), std::string::npos) << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_TRUE(dir.names().empty());
}

}  // namespace
}  // namespace h3s::test
