// safetensors: a file written by the `safetensors` package, our writer round-tripping,
// malformed headers, and random corruption.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "luminal/error.hpp"
#include "luminal/models/safetensors.hpp"

namespace luminal::models {
namespace {

namespace fs = std::filesystem;
const std::string kMixed = std::string(LUMINAL_FIXTURE_DIR) + "/safetensors/mixed.safetensors";

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string temp(const std::string& name) {
  return (fs::path(::testing::TempDir()) / name).string();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file whose header is `json` and whose data section has `data_bytes` bytes.
std::string with_header(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\x01');
}

TEST(Safetensors, ReadsEveryDtypeWrittenByTheReferenceLibrary) {
  SafetensorsFile f(kMixed);
  EXPECT_EQ(f.metadata().at("note"), "luminal test");
  EXPECT_EQ(f.tensors().size(), 10u);
  EXPECT_EQ(f.tensor("f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.read("f32").to_f32(), (std::vector<float>{-1, -0.5, 0, 0.5, 1, 1.5}));
  EXPECT_EQ(f.read("f16").to_f32(),
            (std::vector<float>{0.5f, -2.0f, 65504.0f, static_cast<float>(f16(1e-4))}));
  EXPECT_EQ(f.read("bf16").to_f32(),
            (std::vector<float>{1.0f, -1.5f, 3.25f, static_cast<float>(bf16(1e30))}));
  EXPECT_EQ(f.read("f64").to_f64(), (std::vector<double>{1e-300, -2.5}));
  EXPECT_EQ(f.read("i64").to_i64(), (std::vector<int64_t>{-5, 0, int64_t{1} << 40}));
  EXPECT_EQ(f.read("i32").to_i64(), (std::vector<int64_t>{7, -7}));
  EXPECT_EQ(f.read("i8").to_i64(), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(f.read("u8").to_i64(), (std::vector<int64_t>{0, 200, 255}));
  EXPECT_EQ(f.read("bool").to_i64(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f.read("empty").numel(), 0u);
  EXPECT_THROW(f.tensor("nope"), Error);
}

TEST(Safetensors, WriterRoundTripsAndIsAtomic) {
  Buffer a = Buffer::from(std::vector<float>{1, 2, 3, 4, 5, 6});
  Buffer b = Buffer::from(std::vector<int64_t>{-1, 1LL << 50});
  const std::string path = temp("roundtrip.safetensors");
  save_safetensors(path, {{"w.weight", {2, 3}, &a}, {"steps", {2}, &b}}, {{"k", "v \"quoted\""}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.read("w.weight").to_f32(), a.to_f32());
  EXPECT_EQ(f.read("steps").to_i64(), b.to_i64());
  EXPECT_EQ(f.metadata().at("k"), "v \"quoted\"");
  // A failing save leaves the previous file untouched.
  const std::string before = slurp(path);
  EXPECT_THROW(save_safetensors(path, {{"bad", {7}, &a}}), Error);
  EXPECT_EQ(slurp(path), before);
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  auto expect_error = [](const std::string& bytes, const char* fragment) {
    const std::string path = temp("bad.safetensors");
    write(path, bytes);
    try {
      SafetensorsFile f(path);
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error("abc", "not a safetensors file");
  expect_error(with_header(std::string(1000, ' '), 0).substr(0, 8) + "{}", "header size");
  expect_error(with_header("{\"a\":", 0), "invalid JSON");
  expect_error(with_header("[]", 0), "not a JSON object");
  expect_error(with_header(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1),
               "unsupported dtype F8");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
               "needs 8");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
               "truncated");
  expect_error(
      with_header(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
          6),
      "overlapping");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
               "belong to no tensor");
  expect_error(with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               "bad dimension");
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const std::string good = slurp(kMixed);
  uint64_t header;
  std::memcpy(&header, good.data(), 8);
  std::mt19937 rng(8);
  const std::string path = temp("fuzz.safetensors");
  int ok = 0, rejected = 0;
  for (int k = 0; k < 2000; ++k) {
    std::string bytes = good;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 6); e < n; ++e)
      bytes[rng() % (8 + header)] = "{}[]\",:0123456789e-FI \x00\xff"[rng() % 24];
    if (rng() % 5 == 0) bytes.resize(rng() % bytes.size());
    write(path, bytes);
    try {
      SafetensorsFile f(path);
      for (const auto& t : f.tensors()) f.read(t.name);
      ++ok;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(ok, 5);
}

}  // namespace
}  // namespace luminal::models
