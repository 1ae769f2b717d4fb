#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "ops/golden_file.hpp"
#include "temp_dir.hpp"

namespace h3s {
namespace {

namespace fs = std::filesystem;

using test::golden_path;
using test::TempDir;

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good());
}

// 8-byte little-endian header length, the header text, then `data_bytes` zeros.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string s;
  for (size_t i = 0; i < 8; ++i) s.push_back(char((uint64_t(header.size()) >> (8 * i)) & 0xffu));
  return s + header + std::string(data_bytes, '\0');
}

// Runs f and expects Error(bad_input) whose message contains every needle.
template <class F>
void expect_bad_input(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected Error(bad_input), nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
  }
}

// Writes `content` to a temp file and expects open() to reject it.
void expect_open_fails(const std::string& content, const std::vector<std::string>& needles) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_raw(path, content);
  std::vector<std::string> all = needles;
  all.push_back(path);  // every message names the file
  expect_bad_input([&] { SafetensorsFile::open(path); }, all);
}

template <class T>
std::span<const std::byte> as_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

void expect_entry(const SafetensorsFile& f, const std::string& name, const std::string& dtype,
                  const std::vector<int64_t>& shape) {
  ASSERT_TRUE(f.contains(name)) << f.path() << ": " << name;
  const TensorEntry& e = f.entry(name);
  EXPECT_EQ(e.name, name);
  EXPECT_EQ(e.dtype, dtype) << name;
  EXPECT_EQ(e.shape, shape) << name;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  EXPECT_EQ(e.bytes, size_t(n) * e.elem_size) << name;
}

// ---- round trip ---------------------------------------------------------------

TEST(SafetensorsRoundTrip, WriteThenOpenGivesIdenticalBytes) {
  TempDir dir;
  const std::string path = dir.file("rt.safetensors");
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const std::vector<uint16_t> bf16_bits = {0x3f80, 0xbf80, 0x7f80};  // odd count: unaligned next
  const std::vector<int8_t> i8 = {-128, -1, 0, 1, 127, 5, 6, 7};
  const std::vector<int64_t> i64 = {int64_t(1) << 40, -3};
  const std::vector<uint8_t> fp8 = {0x00, 0x7e, 0xfe, 0x38};
  const std::vector<float> scalar = {42.0f};
  const std::vector<float> empty;
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h3s \"test\""}};

  write_safetensors(path,
                    {{"z.f32", "F32", {2, 3}, as_bytes(f32)},
                     {"a.bf16", "BF16", {3}, as_bytes(bf16_bits)},
                     {"m.i8", "I8", {2, 2, 2}, as_bytes(i8)},
                     {"b.i64", "I64", {2}, as_bytes(i64)},
                     {"c.fp8", "F8_E4M3", {4, 1}, as_bytes(fp8)},
                     {"s.scalar", "F32", {}, as_bytes(scalar)},
                     {"e.empty", "F32", {0, 5}, as_bytes(empty)}},
                    meta);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"rt.safetensors"}) << "a temp file was left";

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.bf16", "b.i64", "c.fp8", "e.empty", "m.i8",
                                                 "s.scalar", "z.f32"}));
  expect_entry(f, "z.f32", "F32", {2, 3});
  expect_entry(f, "a.bf16", "BF16", {3});
  expect_entry(f, "m.i8", "I8", {2, 2, 2});
  expect_entry(f, "b.i64", "I64", {2});
  expect_entry(f, "c.fp8", "F8_E4M3", {4, 1});
  expect_entry(f, "s.scalar", "F32", {});
  expect_entry(f, "e.empty", "F32", {0, 5});

  EXPECT_EQ(f.read_as<float>("z.f32", "F32"), f32);
  EXPECT_EQ(f.read_as<uint16_t>("a.bf16", "BF16"), bf16_bits);
  EXPECT_EQ(f.read_as<int8_t>("m.i8", "I8"), i8);
  EXPECT_EQ(f.read_as<int64_t>("b.i64", "I64"), i64);
  EXPECT_EQ(f.read_as<uint8_t>("c.fp8", "F8_E4M3"), fp8);
  EXPECT_EQ(f.read_as<float>("s.scalar", "F32"), scalar);
  EXPECT_TRUE(f.read_as<float>("e.empty", "F32").empty());
  // -0.0f survives bit for bit (vector== compares values, so check bits).
  EXPECT_EQ(std::memcmp(f.entry("z.f32").data, f32.data(), f32.size() * 4), 0);

  // The reference layout: header padded to 8 bytes, data contiguous, largest
  // element size first (then by name), so every tensor starts aligned for its dtype.
  std::ifstream in(path, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(raw[size_t(i)]);
  EXPECT_EQ(n % 8, 0u);
  const size_t total =
      f32.size() * 4 + bf16_bits.size() * 2 + i8.size() + i64.size() * 8 + fp8.size() + 4;
  EXPECT_EQ(raw.size(), 8 + n + total);
  EXPECT_EQ(raw.substr(8, 16), "{\"__metadata__\":");
  // b.i64 (8-byte elements) opens the data section; a.bf16 follows the F32s.
  EXPECT_EQ(std::memcmp(raw.data() + 8 + n, i64.data(), 16), 0);
  // after b.i64 (16 bytes), then the F32s by name: e.empty (0), s.scalar (4), z.f32
  const size_t bf16_at = i64.size() * 8 + 0 + 4 + f32.size() * 4;
  EXPECT_EQ(std::memcmp(raw.data() + 8 + n + bf16_at, bf16_bits.data(), 6), 0);
  for (const std::string& name : f.names()) {
    const TensorEntry& e = f.entry(name);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(e.data) % e.elem_size, 0u) << name << " misaligned";
  }
}

TEST(SafetensorsRoundTrip, EmptyFileAndNoMetadata) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {}, {});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(fs::file_size(path), 16u);  // 8 + "{}" padded to 8
}

TEST(SafetensorsRoundTrip, MoveKeepsDataValid) {
  TempDir dir;
  const std::string path = dir.file("mv.safetensors");
  const std::vector<int32_t> v = {1, 2, 3, 4};
  write_safetensors(path, {{"v", "I32", {4}, as_bytes(v)}}, {});
  SafetensorsFile a = SafetensorsFile::open(path);
  const std::byte* p = a.entry("v").data;
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.entry("v").data, p);
  EXPECT_EQ(b.read_as<int32_t>("v", "I32"), v);
  SafetensorsFile c = SafetensorsFile::open(path);
  c = std::move(b);
  EXPECT_EQ(c.read_as<int32_t>("v", "I32"), v);
}

TEST(SafetensorsRoundTrip, ViewIsContiguousHostTensor) {
  TempDir dir;
  const std::string path = dir.file("view.safetensors");
  const std::vector<float> x(2 * 3 * 4, 1.0f);
  const std::vector<double> d = {1.0};
  const std::vector<uint8_t> six(32, 0);
  write_safetensors(path,
                    {{"a.x", "F32", {2, 3, 4}, as_bytes(x)},
                     {"b.d", "F64", {1}, as_bytes(d)},
                     {"c.s", "U8", {}, std::span(as_bytes(six).data(), 1)},
                     {"d.six", "U8", {1, 2, 2, 2, 2, 2}, as_bytes(six)}},
                    {});
  const SafetensorsFile f = SafetensorsFile::open(path);
  const Tensor t = f.view("a.x");
  EXPECT_EQ(t.dtype, DType::f32);
  EXPECT_EQ(t.device, Device::host);
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.shape[0], 2);
  EXPECT_EQ(t.shape[2], 4);
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_EQ(t.stride[2], 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.data, static_cast<const void*>(f.entry("a.x").data));
  EXPECT_EQ(t.ptr<float>()[5], 1.0f);

  const Tensor s = f.view("c.s");  // scalar -> [1]
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.numel(), 1);

  expect_bad_input([&] { f.view("b.d"); }, {path, "'b.d'", "F64"});
  expect_bad_input([&] { f.view("d.six"); }, {path, "'d.six'", "4 dimensions"});

  // Another writer's file may leave a tensor off its alignment: a U8 byte at 0,
  // then an F32 at offset 1. A view refuses it; read_as copes (memcpy).
  const std::string mis_path = dir.file("misaligned.safetensors");
  std::string header = R"({"c.s":{"dtype":"U8","shape":[],"data_offsets":[0,1]},)"
                       R"("e.mis":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section 8-byte aligned
  std::string raw = raw_file(header, 5);
  const float two = 2.0f;
  std::memcpy(raw.data() + raw.size() - 4, &two, 4);
  write_raw(mis_path, raw);
  const SafetensorsFile m = SafetensorsFile::open(mis_path);
  expect_bad_input([&] { m.view("e.mis"); }, {mis_path, "'e.mis'", "aligned"});
  EXPECT_EQ(m.read_as<float>("e.mis", "F32"), std::vector<float>{2.0f});
}

TEST(SafetensorsRoundTrip, EngineDtypeMapping) {
  EXPECT_EQ(to_engine_dtype("BF16"), DType::bf16);
  EXPECT_EQ(to_engine_dtype("F16"), DType::f16);
  EXPECT_EQ(to_engine_dtype("F32"), DType::f32);
  EXPECT_EQ(to_engine_dtype("I8"), DType::i8);
  EXPECT_EQ(to_engine_dtype("U8"), DType::u8);
  EXPECT_EQ(to_engine_dtype("I32"), DType::i32);
  EXPECT_EQ(to_engine_dtype("F8_E4M3"), DType::f8e4m3);
  for (const char* other : {"F64", "I16", "I64", "F8_E5M2", "BOOL", "bf16", ""}) {
    EXPECT_FALSE(to_engine_dtype(other).has_value()) << other;
  }
  EXPECT_EQ(safetensors_dtype_size("F64"), 8u);
  EXPECT_EQ(safetensors_dtype_size("BOOL"), 1u);
  EXPECT_FALSE(safetensors_dtype_size("F4").has_value());
}

// ---- writer validation --------------------------------------------------------

TEST(SafetensorsWrite, RejectsBadEntriesWithoutCreatingFiles) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::vector<float> v(6, 0.0f);
  expect_bad_input(
      [&] {
        write_safetensors(path, {{"x", "F32", {10, 30}, as_bytes(v)}}, {});
      },
      {path, "'x'", "24 bytes", "[10, 30] x F32 needs 1200"});
  expect_bad_input(
      [&] {
        write_safetensors(path, {{"x", "F33", {6}, as_bytes(v)}}, {});
      },
      {"'x'", "F33"});
  expect_bad_input(
      [&] {
        write_safetensors(path, {{"x", "F32", {-6}, as_bytes(v)}}, {});
      },
      {"'x'", "negative"});
  expect_bad_input(
      [&] {
        write_safetensors(path, {{"x", "F32", {6}, as_bytes(v)}, {"x", "F32", {6}, as_bytes(v)}},
                          {});
      },
      {"'x'", "twice"});
  expect_bad_input(
      [&] {
        write_safetensors(path, {{"__metadata__", "F32", {6}, as_bytes(v)}}, {});
      },
      {"__metadata__"});
  EXPECT_TRUE(dir.names().empty()) << "a refused write left a file";
}

TEST(SafetensorsWrite, UnwritablePathLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("no_such_dir/w.safetensors");
  expect_bad_input([&] { write_safetensors(path, {}, {}); },
                   {path, "cannot write", "No such file or directory"});
  EXPECT_TRUE(dir.names().empty());
}

// ---- golden files -------------------------------------------------------------

TEST(SafetensorsGolden, AllFiveOpenWithProvenance) {
  for (const char* name :
       {"ck_rms_rope", "ck_int8_linear", "ck_w4a8_linear", "ck_convrot_quant", "ck_swiglu_fc2"}) {
    const SafetensorsFile f = SafetensorsFile::open(golden_path(name));
    EXPECT_FALSE(f.names().empty()) << name;
    ASSERT_TRUE(f.metadata().count("comfy_kitchen_version")) << name;
    EXPECT_EQ(f.metadata().at("comfy_kitchen_version"), "0.2.31") << name;
  }
}

TEST(SafetensorsGolden, RmsRope) {
  const SafetensorsFile f = SafetensorsFile::open(golden_path("ck_rms_rope"));
  expect_entry(f, "q_in", "BF16", {1, 37, 4, 128});
  expect_entry(f, "rope_table", "BF16", {1, 37, 1, 48, 2, 2});
  expect_entry(f, "inv_freq", "F32", {16});
  const std::vector<float> inv_freq = f.read_as<float>("inv_freq", "F32");
  ASSERT_EQ(inv_freq.size(), 16u);
  for (float v : inv_freq) EXPECT_TRUE(v > 0.0f && v <= 1.0f) << v;
  EXPECT_EQ(f.view("q_in").rank, 4);
}

TEST(SafetensorsGolden, Int8Linear) {
  const SafetensorsFile f = SafetensorsFile::open(golden_path("ck_int8_linear"));
  expect_entry(f, "weight", "I8", {768, 512});
  expect_entry(f, "weight_scale", "F32", {768, 1});
  expect_entry(f, "M300.x", "BF16", {300, 512});
  const Tensor w = f.view("weight");
  EXPECT_EQ(w.dtype, DType::i8);
  EXPECT_EQ(w.rows(), 768);
  EXPECT_EQ(w.cols(), 512);
}

TEST(SafetensorsGolden, W4A8Linear) {
  const SafetensorsFile f = SafetensorsFile::open(golden_path("ck_w4a8_linear"));
  expect_entry(f, "cb.weight_s_rel", "F8_E4M3", {256, 32});
  EXPECT_EQ(f.view("cb.weight_s_rel").dtype, DType::f8e4m3);
}

// ---- from_bytes --------------------------------------------------------------

std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

TEST(SafetensorsFromBytes, WriterOutputRoundTrips) {
  TempDir dir;
  const std::string path = dir.file("mem.safetensors");
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f};
  const std::vector<uint8_t> u8 = {1, 2, 3};
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  write_safetensors(path, {{"w", "F32", {2, 2}, as_bytes(f32)}, {"z", "U8", {3}, as_bytes(u8)}},
                    meta);
  SafetensorsFile a = SafetensorsFile::from_bytes(file_bytes(path), "in-memory");
  EXPECT_EQ(a.path(), "in-memory");
  EXPECT_EQ(a.metadata(), meta);
  EXPECT_EQ(a.names(), (std::vector<std::string>{"w", "z"}));
  expect_entry(a, "w", "F32", {2, 2});
  expect_entry(a, "z", "U8", {3});
  // Moving keeps the owned bytes (and so the entries' pointers) valid.
  const SafetensorsFile f = std::move(a);
  EXPECT_EQ(f.read_as<float>("w", "F32"), f32);
  EXPECT_EQ(f.read_as<uint8_t>("z", "U8"), u8);
  const Tensor t = f.view("w");  // first in name order: 8-byte aligned data
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.shape[0], 2);
}

TEST(SafetensorsFromBytes, EveryTruncationIsRejected) {
  TempDir dir;
  const std::string path = dir.file("trunc.safetensors");
  const std::vector<int32_t> v = {1, 2, 3, 4};
  write_safetensors(path, {{"v", "I32", {4}, as_bytes(v)}}, {{"k", "x"}});
  const std::vector<std::byte> full = file_bytes(path);
  ASSERT_NO_THROW(SafetensorsFile::from_bytes(full, "full"));
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<std::byte> cut(full.begin(), full.begin() + std::ptrdiff_t(n));
    expect_bad_input([&] { SafetensorsFile::from_bytes(std::move(cut), "cut"); }, {"cut"});
  }
  expect_bad_input([&] { SafetensorsFile::from_bytes({}, "nothing"); },
                   {"nothing", "0 bytes", "too short"});
}

TEST(SafetensorsFromBytes, ValidatesLikeOpen) {
  std::string raw = raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4);
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  expect_bad_input([&] { SafetensorsFile::from_bytes(bytes, "mem"); },
                   {"mem", "'a'", "has 4 bytes but shape [2] x F32 needs 8"});
}

// ---- bad input ----------------------------------------------------------------

TEST(SafetensorsBadInput, EmptyFile) {
  expect_open_fails("", {"0 bytes", "too short"});
}

TEST(SafetensorsBadInput, ShorterThanHeaderLength) {
  expect_open_fails("abc", {"3 bytes", "too short"});
}

TEST(SafetensorsBadInput, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("absent.safetensors");
  expect_bad_input([&] { SafetensorsFile::open(path); }, {path, "cannot open"});
}

TEST(SafetensorsBadInput, HeaderLengthPastEndOfFile) {
  std::string s = raw_file("{}", 0);
  s[0] = char(100);  // claims 100 header bytes, file has 2
  expect_open_fails(s, {"header length 100", "past the end"});
}

TEST(SafetensorsBadInput, HeaderTooLarge) {
  // 100 MiB of header would be a real file; claim it and check the limit is
  // enforced even when the length fits (a sparse file keeps this cheap).
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  const uint64_t n = uint64_t(100) << 20;
  std::string head;
  for (size_t i = 0; i < 8; ++i) head.push_back(char((n >> (8 * i)) & 0xffu));
  write_raw(path, head);
  fs::resize_file(path, 8 + n);
  expect_bad_input([&] { SafetensorsFile::open(path); }, {path, "100 MiB"});
}

TEST(SafetensorsBadInput, HeaderNotJson) {
  expect_open_fails(raw_file("{\"a\": [1, 2", 0), {"not valid JSON"});
}

TEST(SafetensorsBadInput, HeaderNotObject) {
  expect_open_fails(raw_file("[1, 2, 3]", 0), {"must be a JSON object", "array"});
}

TEST(SafetensorsBadInput, DuplicateTensorName) {
  expect_open_fails(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                             2),
                    {"'a'", "twice"});
}

TEST(SafetensorsBadInput, UnknownDtype) {
  expect_open_fails(raw_file(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1),
                    {"'w'", "unknown dtype 'F4'"});
}

TEST(SafetensorsBadInput, MissingDtype) {
  expect_open_fails(raw_file(R"({"w":{"shape":[2],"data_offsets":[0,2]}})", 2), {"'w'", "dtype"});
}

TEST(SafetensorsBadInput, NegativeDimension) {
  expect_open_fails(raw_file(R"({"w":{"dtype":"U8","shape":[2,-3],"data_offsets":[0,6]}})", 6),
                    {"'w'", "[2,-3]", "non-negative"});
}

TEST(SafetensorsBadInput, FractionalDimension) {
  expect_open_fails(raw_file(R"({"w":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}})", 2),
                    {"'w'", "non-negative integer"});
}

TEST(SafetensorsBadInput, DataOffsetsPastDataSection) {
  expect_open_fails(raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
                    {"'w'", "[0, 16]", "12-byte data section"});
}

TEST(SafetensorsBadInput, DataOffsetsMalformed) {
  expect_open_fails(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[5,4]}})", 8),
                    {"'w'", "[5,4]", "begin <= end"});
  expect_open_fails(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 8),
                    {"'w'", "data_offsets"});
  expect_open_fails(raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", 8),
                    {"'w'", "data_offsets"});
}

TEST(SafetensorsBadInput, ByteCountNotMatchingShape) {
  expect_open_fails(
      raw_file(R"({"blocks.0.x":{"dtype":"F32","shape":[10,30],"data_offsets":[0,1000]}})", 1000),
      {"tensor 'blocks.0.x' has 1000 bytes but shape [10, 30] x F32 needs 1200"});
}

TEST(SafetensorsBadInput, ShapeProductOverflow) {
  expect_open_fails(
      raw_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
      {"'w'", "more than 2^64"});
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  expect_open_fails(raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]},)"
                             R"("e":{"dtype":"U8","shape":[0],"data_offsets":[3,3]}})",
                             10),
                    {"'a' [0, 8)", "'b' [6, 10)", "overlap"});
}

TEST(SafetensorsBadInput, MetadataNotStrings) {
  expect_open_fails(raw_file(R"({"__metadata__":{"k":1}})", 0), {"metadata 'k'", "string"});
  expect_open_fails(raw_file(R"({"__metadata__":[1]})", 0), {"__metadata__", "object"});
}

TEST(SafetensorsBadInput, MissingTensorLookup) {
  const SafetensorsFile f = SafetensorsFile::open(golden_path("ck_rms_rope"));
  EXPECT_FALSE(f.contains("q_inn"));
  expect_bad_input([&] { f.entry("q_inn"); }, {f.path(), "no tensor named 'q_inn'"});
  expect_bad_input([&] { f.read_as<float>("q_inn", "F32"); }, {"'q_inn'"});
  expect_bad_input([&] { f.view("q_inn"); }, {"'q_inn'"});
}

TEST(SafetensorsBadInput, ReadAsWrongDtype) {
  const SafetensorsFile f = SafetensorsFile::open(golden_path("ck_rms_rope"));
  expect_bad_input([&] { f.read_as<float>("q_in", "F32"); },
                   {f.path(), "'q_in'", "is BF16, expected F32"});
  // Right dtype name, wrong C++ element size.
  expect_bad_input([&] { f.read_as<float>("q_in", "BF16"); }, {"'q_in'", "2 bytes per element"});
}

}  // namespace
}  // namespace h3s
